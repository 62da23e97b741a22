package dev.tarn.bench;

import java.util.HashMap;
import java.util.Map;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * Watches a run: which input offsets have been processed (each record counted after everything
 * downstream of it in its sub-topology ran), how many records went into and came out of each
 * repartition topic, and how many reached the output. The run is over when every input
 * partition is processed to the end offset captured at start and the repartition topics are
 * drained (see {@link #drained()}).
 */
final class Progress {
    // Taps register themselves; each is written by the one stream thread running its task and
    // read here, so its fields are volatile and nothing is shared between threads per record.
    private final Queue<Tap<?, ?>> taps = new ConcurrentLinkedQueue<>();
    private volatile long firstNanos;

    private enum Kind { INPUT, SEND, RECEIVE, OUTPUT }

    /** Taps an input stream right after its source. */
    <K, V> KStream<K, V> input(KStream<K, V> s, String name) {
        return s.processValues(() -> new Tap<K, V>(Kind.INPUT), Named.as("tap-" + name));
    }

    /** Taps a stream just before it is written to a repartition topic. */
    <K, V> KStream<K, V> send(KStream<K, V> s, String name) {
        return s.processValues(() -> new Tap<K, V>(Kind.SEND), Named.as("tap-send-" + name));
    }

    /** Taps a stream just after it was read back from a repartition topic. */
    <K, V> KStream<K, V> receive(KStream<K, V> s, String name) {
        return s.processValues(() -> new Tap<K, V>(Kind.RECEIVE), Named.as("tap-receive-" + name));
    }

    /** Taps a stream just before the output sink. */
    <K, V> KStream<K, V> output(KStream<K, V> s) {
        return s.processValues(() -> new Tap<K, V>(Kind.OUTPUT), Named.as("tap-output"));
    }

    /** Whether every partition in end (offsets one past the last record) has been processed. */
    boolean inputsDone(Map<TopicPartition, Long> end) {
        Map<TopicPartition, Long> processed = new HashMap<>();
        for (Tap<?, ?> t : taps) {
            if (t.kind == Kind.INPUT && t.partition != null) {
                processed.merge(t.partition, t.lastOffset, Math::max);
            }
        }
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            Long p = processed.get(e.getKey());
            if (p == null || p < e.getValue() - 1) {
                return false;
            }
        }
        return true;
    }

    /** Whether every record sent to a repartition topic has been read back and processed. */
    boolean drained() {
        return sum(Kind.RECEIVE) == sum(Kind.SEND);
    }

    /** Seconds from the first record processed to the last one processed by any stage. */
    double seconds() {
        long last = 0;
        for (Tap<?, ?> t : taps) {
            last = Math.max(last, t.lastNanos);
        }
        return firstNanos == 0 ? 0 : (last - firstNanos) / 1e9;
    }

    long outputs() {
        return sum(Kind.OUTPUT);
    }

    long repartitioned() {
        return sum(Kind.SEND);
    }

    private long sum(Kind kind) {
        long n = 0;
        for (Tap<?, ?> t : taps) {
            if (t.kind == kind) {
                n += t.count;
            }
        }
        return n;
    }

    private final class Tap<K, V> implements FixedKeyProcessor<K, V, V> {
        final Kind kind;
        private FixedKeyProcessorContext<K, V> ctx;
        volatile TopicPartition partition;
        volatile long lastOffset = -1;
        volatile long lastNanos;
        volatile long count;

        Tap(Kind kind) {
            this.kind = kind;
        }

        @Override
        public void init(FixedKeyProcessorContext<K, V> context) {
            ctx = context;
            taps.add(this);
        }

        @Override
        public void process(FixedKeyRecord<K, V> r) {
            if (firstNanos == 0) {
                firstNanos = System.nanoTime();
            }
            ctx.forward(r);
            // Counted after forward returns: everything downstream in this sub-topology has run.
            if (kind == Kind.INPUT) {
                ctx.recordMetadata().ifPresent(m -> {
                    if (partition == null) {
                        partition = new TopicPartition(m.topic(), m.partition());
                    }
                    lastOffset = m.offset();
                });
            }
            count = count + 1;
            lastNanos = System.nanoTime();
        }
    }
}
