package dev.tarn.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * Runs one Nexmark query on Kafka Streams and prints one JSON line of figures.
 *
 * <pre>
 * java -jar nexmark-kstreams.jar --mode run|restore --query q5 --brokers 127.0.0.1:9092 \
 *   --person-topic nexmark-person --auction-topic nexmark-auction --bid-topic nexmark-bid \
 *   --output q5-out --app-id q5-alo --guarantee at_least_once|exactly_once_v2 --state-dir DIR \
 *   [--threads 2] [--commit-interval-ms N] [--timeout-s 1800]
 * </pre>
 *
 * <p>run: processes the inputs from the start until the end offsets captured at start are
 * processed and every repartition topic is drained, then closes (flushing outputs) and prints
 * records, seconds and records/s. restore: wipes the state dir, starts the same application
 * again and prints how many changelog records it restored, how long that took, and the rate.
 * cleanup: deletes the output topic and the application's internal topics.
 */
public final class Main {
    private Main() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = parse(argv);
        String mode = a.getOrDefault("mode", "run");
        Queries.Topics topics = new Queries.Topics(a.getOrDefault("person-topic", "nexmark-person"),
            a.getOrDefault("auction-topic", "nexmark-auction"), a.getOrDefault("bid-topic", "nexmark-bid"),
            require(a, "output"));
        if (mode.equals("cleanup")) {
            a.putIfAbsent("state-dir", "unused");
        }
        Properties props = props(a);
        Duration timeout = Duration.ofSeconds(Long.parseLong(a.getOrDefault("timeout-s", "1800")));
        String json = switch (mode) {
            case "run" -> run(a, topics, props, timeout);
            case "restore" -> restore(a, topics, props, timeout);
            case "cleanup" -> cleanup(topics, props);
            default -> throw new IllegalArgumentException("--mode " + mode + ": use run or restore");
        };
        System.out.println(json);
        System.out.flush();
        // Kafka's client threads can outlive close by a moment; the figures are out.
        System.exit(0);
    }

    private static Map<String, String> parse(String[] argv) {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("arguments are --name value pairs; got " + argv[i]);
            }
            a.put(argv[i].substring(2), argv[++i]);
        }
        return a;
    }

    private static String require(Map<String, String> a, String name) {
        String v = a.get(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("--" + name + " is required");
        }
        return v;
    }

    private static Properties props(Map<String, String> a) {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, require(a, "brokers"));
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, require(a, "app-id"));
        p.put(StreamsConfig.STATE_DIR_CONFIG, require(a, "state-dir"));
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, a.getOrDefault("guarantee", StreamsConfig.AT_LEAST_ONCE));
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, a.getOrDefault("threads", "2"));
        p.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, StreamsConfig.OPTIMIZE);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // Kafka Streams keeps a closed member in its group until the session times out (45 s);
        // leaving on close lets the restore run that follows get its partitions at once.
        p.put(StreamsConfig.consumerPrefix("internal.leave.group.on.close"), "true");
        if (a.containsKey("commit-interval-ms")) {
            p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, a.get("commit-interval-ms"));
        }
        return p;
    }

    private static Admin admin(Properties p) {
        return Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG,
            p.getProperty(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG)));
    }

    private static String run(Map<String, String> a, Queries.Topics topics, Properties props, Duration timeout)
        throws Exception {
        String name = require(a, "query");
        Progress progress = new Progress();
        StreamsBuilder b = new StreamsBuilder();
        Queries.Query q = new Queries(b, topics, progress).build(name);
        Map<TopicPartition, Long> end;
        long records;
        try (Admin adm = admin(props)) {
            Map<TopicPartition, Long> start = offsets(adm, q.inputs(), OffsetSpec.earliest());
            end = offsets(adm, q.inputs(), OffsetSpec.latest());
            end.entrySet().removeIf(e -> e.getValue() <= start.get(e.getKey()));
            records = end.entrySet().stream().mapToLong(e -> e.getValue() - start.get(e.getKey())).sum();
            createOutput(adm, topics.output(), partitions(adm, q.inputs().get(0)));
        }
        long wallStart = System.nanoTime();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        KafkaStreams streams = start(b, props, failed);
        try (Admin adm = admin(props)) {
            waitDone(streams, progress, q, end, adm, props, failed, timeout);
        }
        streams.close(new KafkaStreams.CloseOptions().leaveGroup(true).timeout(Duration.ofMinutes(2)));
        double wall = (System.nanoTime() - wallStart) / 1e9;
        double secs = progress.seconds();
        return String.format(Locale.ROOT, "{\"system\":\"kstreams\",\"mode\":\"run\",\"query\":\"%s\","
                + "\"guarantee\":\"%s\",\"records\":%d,\"seconds\":%.3f,\"recordsPerSec\":%.1f,"
                + "\"outputs\":%d,\"repartitioned\":%d,\"wallSeconds\":%.3f}",
            name, props.get(StreamsConfig.PROCESSING_GUARANTEE_CONFIG), records, secs, records / secs,
            progress.outputs(), progress.repartitioned(), wall);
    }

    private static KafkaStreams start(StreamsBuilder b, Properties props, AtomicReference<Throwable> failed) {
        KafkaStreams streams = new KafkaStreams(b.build(props), props);
        streams.setUncaughtExceptionHandler(e -> {
            failed.compareAndSet(null, e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        return streams;
    }

    /**
     * Waits until the inputs are processed to their end offsets and the repartition topics are
     * drained. A query whose repartition follows a cached aggregation (q5) must also see its
     * input offsets committed: a commit flushes the cache, so after it nothing more is sent.
     */
    private static void waitDone(KafkaStreams streams, Progress progress, Queries.Query q,
        Map<TopicPartition, Long> end, Admin adm, Properties props, AtomicReference<Throwable> failed,
        Duration timeout) throws Exception {
        streams.start();
        long deadline = System.nanoTime() + timeout.toNanos();
        String group = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
        while (true) {
            if (failed.get() != null) {
                throw new IllegalStateException("kafka streams failed", failed.get());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("not done after " + timeout + "; raise --timeout-s");
            }
            if (progress.inputsDone(end) && (!q.cachedBeforeRepartition() || committed(adm, group, end))
                && progress.drained()) {
                return;
            }
            Thread.sleep(q.cachedBeforeRepartition() ? 200 : 20);
        }
    }

    private static boolean committed(Admin adm, String group, Map<TopicPartition, Long> end) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> c = adm.listConsumerGroupOffsets(group)
            .partitionsToOffsetAndMetadata().get();
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            OffsetAndMetadata o = c.get(e.getKey());
            if (o == null || o.offset() < e.getValue()) {
                return false;
            }
        }
        return true;
    }

    private static String restore(Map<String, String> a, Queries.Topics topics, Properties props, Duration timeout)
        throws Exception {
        String name = require(a, "query");
        wipe(Path.of(props.getProperty(StreamsConfig.STATE_DIR_CONFIG)));
        StreamsBuilder b = new StreamsBuilder();
        new Queries(b, topics, new Progress()).build(name);
        String app = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
        int expected;
        try (Admin adm = admin(props)) {
            expected = nonEmptyChangelogPartitions(adm, app);
        }
        Restores restores = new Restores();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        KafkaStreams streams = start(b, props, failed);
        streams.setGlobalStateRestoreListener(restores);
        long wallStart = System.nanoTime();
        streams.start();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!restores.done(expected, streams.state())) {
            if (failed.get() != null) {
                throw new IllegalStateException("kafka streams failed", failed.get());
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("restore not done after " + timeout);
            }
            Thread.sleep(20);
        }
        double wall = (System.nanoTime() - wallStart) / 1e9;
        streams.close(new KafkaStreams.CloseOptions().leaveGroup(true).timeout(Duration.ofMinutes(2)));
        double secs = restores.seconds();
        return String.format(Locale.ROOT, "{\"system\":\"kstreams\",\"mode\":\"restore\",\"query\":\"%s\","
                + "\"guarantee\":\"%s\",\"records\":%d,\"seconds\":%.3f,\"recordsPerSec\":%.1f,"
                + "\"changelogPartitions\":%d,\"wallSeconds\":%.3f}",
            name, props.get(StreamsConfig.PROCESSING_GUARANTEE_CONFIG), restores.records(), secs,
            secs > 0 ? restores.records() / secs : 0.0, restores.ended(), wall);
    }

    private static String cleanup(Queries.Topics topics, Properties props) throws Exception {
        String app = props.getProperty(StreamsConfig.APPLICATION_ID_CONFIG);
        try (Admin adm = admin(props)) {
            List<String> doomed = adm.listTopics().names().get().stream()
                .filter(n -> n.startsWith(app + "-") || n.equals(topics.output())).toList();
            adm.deleteTopics(doomed).all().get();
            return String.format(Locale.ROOT, "{\"system\":\"kstreams\",\"mode\":\"cleanup\",\"deleted\":%d}",
                doomed.size());
        }
    }

    /** Counts the partitions of the application's changelog topics that hold records. */
    private static int nonEmptyChangelogPartitions(Admin adm, String app) throws Exception {
        List<String> changelogs = adm.listTopics().names().get().stream()
            .filter(n -> n.startsWith(app + "-") && n.endsWith("-changelog")).toList();
        if (changelogs.isEmpty()) {
            return 0;
        }
        Map<TopicPartition, Long> start = offsets(adm, changelogs, OffsetSpec.earliest());
        Map<TopicPartition, Long> end = offsets(adm, changelogs, OffsetSpec.latest());
        return (int) end.entrySet().stream().filter(e -> e.getValue() > start.get(e.getKey())).count();
    }

    private static void wipe(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(p);
            }
        }
    }

    private static Map<TopicPartition, Long> offsets(Admin adm, List<String> topics, OffsetSpec spec)
        throws Exception {
        Map<TopicPartition, OffsetSpec> req = new HashMap<>();
        for (var d : adm.describeTopics(topics).allTopicNames().get().values()) {
            d.partitions().forEach(p -> req.put(new TopicPartition(d.name(), p.partition()), spec));
        }
        Map<TopicPartition, Long> out = new HashMap<>();
        adm.listOffsets(req).all().get().forEach((tp, info) -> out.put(tp, info.offset()));
        return out;
    }

    private static int partitions(Admin adm, String topic) throws Exception {
        return adm.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
    }

    private static void createOutput(Admin adm, String topic, int partitions) throws Exception {
        try {
            adm.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)
                .configs(Map.of("retention.ms", "-1")))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }
}
