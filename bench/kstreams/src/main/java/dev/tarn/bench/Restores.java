package dev.tarn.bench;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.processor.StateRestoreListener;

/** Counts what Kafka Streams restores from changelogs, and when it started and ended. */
final class Restores implements StateRestoreListener {
    private final AtomicLong records = new AtomicLong();
    private final AtomicInteger started = new AtomicInteger();
    private final AtomicInteger ended = new AtomicInteger();
    private final AtomicLong firstStart = new AtomicLong();
    private final AtomicLong lastEnd = new AtomicLong();

    @Override
    public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
        firstStart.compareAndSet(0, System.nanoTime());
        started.incrementAndGet();
    }

    @Override
    public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long n) {}

    @Override
    public void onRestoreEnd(TopicPartition tp, String store, long total) {
        records.addAndGet(total);
        lastEnd.accumulateAndGet(System.nanoTime(), Math::max);
        ended.incrementAndGet();
    }

    /**
     * Whether restoring is over: every non-empty changelog partition was restored, or (when a
     * partition needed nothing, e.g. it holds only transaction markers) the application runs with
     * no restore open.
     */
    boolean done(int expected, KafkaStreams.State state) {
        int s = started.get();
        int e = ended.get();
        if (expected == 0) {
            return state == KafkaStreams.State.RUNNING;
        }
        return e >= expected || (state == KafkaStreams.State.RUNNING && s > 0 && s == e
            && System.nanoTime() - lastEnd.get() > 3_000_000_000L);
    }

    long records() {
        return records.get();
    }

    int ended() {
        return ended.get();
    }

    double seconds() {
        return firstStart.get() == 0 ? 0 : (lastEnd.get() - firstStart.get()) / 1e9;
    }
}
