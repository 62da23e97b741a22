package dev.tarn.bench;

import dev.tarn.bench.Model.Auction;
import dev.tarn.bench.Model.AuctionPrice;
import dev.tarn.bench.Model.Bid;
import dev.tarn.bench.Model.BidWithAuction;
import dev.tarn.bench.Model.DayStats;
import dev.tarn.bench.Model.EuroBid;
import dev.tarn.bench.Model.HighestBid;
import dev.tarn.bench.Model.HotItem;
import dev.tarn.bench.Model.LocalItem;
import dev.tarn.bench.Model.NewSeller;
import dev.tarn.bench.Model.Person;
import dev.tarn.bench.Model.PriceAgg;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.List;
import java.util.Set;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The Nexmark queries as Kafka Streams topologies. Each reads the generator's topics (values
 * decoded by Jackson, event time from the dateTime field) and writes JSON to one output topic;
 * bench/README.md defines every output record, so tarn's results can be compared one by one.
 */
final class Queries {
    static final Serde<String> STRING = Serdes.String();
    static final Serde<Person> PERSON = JsonSerde.of(Person.class);
    static final Serde<Auction> AUCTION = JsonSerde.of(Auction.class);
    static final Serde<Bid> BID = JsonSerde.of(Bid.class);

    /** Grace of every window: the generator's event times are ordered within each partition. */
    static final Duration GRACE = Duration.ofSeconds(5);

    /** Names the three input topics and the output topic. */
    record Topics(String person, String auction, String bid, String output) {}

    /** A query: which inputs it reads, and whether its done check must wait for commits. */
    record Query(String name, List<String> inputs, boolean cachedBeforeRepartition) {}

    private final StreamsBuilder b;
    private final Topics t;
    private final Progress p;

    Queries(StreamsBuilder b, Topics t, Progress p) {
        this.b = b;
        this.t = t;
        this.p = p;
    }

    static final List<String> NAMES = List.of("q0", "q1", "q2", "q3", "q5", "q7", "q8", "q17", "q18", "q20");

    /** Adds query name to the builder and describes it. */
    Query build(String name) {
        return switch (name) {
            case "q0" -> { out(bids(), BID); yield bidsOnly(name); }
            case "q1" -> { out(bids().mapValues(EuroBid::of), JsonSerde.of(EuroBid.class)); yield bidsOnly(name); }
            case "q2" -> { q2(); yield bidsOnly(name); }
            case "q3" -> { q3(); yield new Query(name, List.of(t.person, t.auction), false); }
            case "q5" -> { q5(); yield new Query(name, List.of(t.bid), true); }
            case "q7" -> { q7(); yield bidsOnly(name); }
            case "q8" -> { q8(); yield new Query(name, List.of(t.person, t.auction), false); }
            case "q17" -> { q17(); yield bidsOnly(name); }
            case "q18" -> { q18(); yield bidsOnly(name); }
            case "q20" -> { q20(); yield new Query(name, List.of(t.bid, t.auction), false); }
            default -> throw new IllegalArgumentException("unknown query " + name + "; use one of " + NAMES);
        };
    }

    private Query bidsOnly(String name) {
        return new Query(name, List.of(t.bid), false);
    }

    private static <V> TimestampExtractor eventTime(java.util.function.ToLongFunction<V> f) {
        return (record, partitionTime) -> {
            @SuppressWarnings("unchecked")
            V v = (V) record.value();
            return v == null ? partitionTime : f.applyAsLong(v);
        };
    }

    private KStream<String, Bid> bids() {
        return p.input(b.stream(t.bid, Consumed.with(STRING, BID)
            .withTimestampExtractor(eventTime((Bid x) -> x.dateTime))), "bid");
    }

    private KStream<String, Auction> auctions() {
        return p.input(b.stream(t.auction, Consumed.with(STRING, AUCTION)
            .withTimestampExtractor(eventTime((Auction x) -> x.dateTime))), "auction");
    }

    private KStream<String, Person> persons() {
        return p.input(b.stream(t.person, Consumed.with(STRING, PERSON)
            .withTimestampExtractor(eventTime((Person x) -> x.dateTime))), "person");
    }

    private <V> void out(KStream<String, V> s, Serde<V> serde) {
        p.output(s).to(t.output, Produced.with(STRING, serde));
    }

    /** Writes s to the repartition topic `<app>-<name>-repartition` and reads it back. */
    private <V> KStream<String, V> repartition(KStream<String, V> s, String name, Serde<V> serde) {
        KStream<String, V> back = p.send(s, name).repartition(Repartitioned.<String, V>as(name)
            .withKeySerde(STRING).withValueSerde(serde));
        return p.receive(back, name);
    }

    private void q2() {
        out(bids().filter((k, x) -> x.auction % 123 == 0).mapValues(x -> {
            AuctionPrice o = new AuctionPrice();
            o.auction = x.auction;
            o.price = x.price;
            return o;
        }), JsonSerde.of(AuctionPrice.class));
    }

    private static final Set<String> Q3_STATES = Set.of("OR", "ID", "CA");

    private void q3() {
        KTable<String, Person> sellers = persons().filter((k, x) -> Q3_STATES.contains(x.state))
            .toTable(Materialized.<String, Person, KeyValueStore<Bytes, byte[]>>as("q3-persons")
                .withKeySerde(STRING).withValueSerde(PERSON));
        KStream<String, Auction> bySeller = repartition(auctions().filter((k, a) -> a.category == 10)
            .selectKey((k, a) -> Long.toString(a.seller)), "q3-by-seller", AUCTION);
        out(bySeller.join(sellers, (a, s) -> {
            LocalItem o = new LocalItem();
            o.name = s.name;
            o.city = s.city;
            o.state = s.state;
            o.id = a.id;
            return o;
        }, Joined.with(STRING, AUCTION, PERSON)), JsonSerde.of(LocalItem.class));
    }

    private void q5() {
        Serde<HotItem> hot = JsonSerde.of(HotItem.class);
        KStream<String, HotItem> counts = bids().groupByKey(Grouped.with(STRING, BID))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), GRACE).advanceBy(Duration.ofSeconds(2)))
            .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("q5-counts")
                .withKeySerde(STRING).withValueSerde(Serdes.Long()))
            .toStream()
            .map((w, n) -> {
                HotItem o = new HotItem();
                o.windowStart = w.window().start();
                o.windowEnd = w.window().end();
                o.auction = Long.parseLong(w.key());
                o.count = n;
                return org.apache.kafka.streams.KeyValue.pair(Long.toString(o.windowStart), o);
            });
        // Counts only grow, so the maximum over every update of a window is its final maximum.
        KTable<String, HotItem> top = repartition(counts, "q5-by-window", hot).groupByKey(Grouped.with(STRING, hot))
            .reduce(Queries::hotter, Materialized.<String, HotItem, KeyValueStore<Bytes, byte[]>>as("q5-top")
                .withKeySerde(STRING).withValueSerde(hot));
        out(top.toStream(), hot);
    }

    /** The hotter item: more bids, then the smaller auction id. */
    static HotItem hotter(HotItem a, HotItem b) {
        if (a.count != b.count) {
            return a.count > b.count ? a : b;
        }
        return a.auction <= b.auction ? a : b;
    }

    static final long Q7_WINDOW = 10_000;

    private void q7() {
        Serde<HighestBid> hb = JsonSerde.of(HighestBid.class);
        KStream<String, HighestBid> byWindow = bids().map((k, x) -> {
            HighestBid o = new HighestBid();
            o.windowStart = Math.floorDiv(x.dateTime, Q7_WINDOW) * Q7_WINDOW;
            o.windowEnd = o.windowStart + Q7_WINDOW;
            o.auction = x.auction;
            o.bidder = x.bidder;
            o.price = x.price;
            o.dateTime = x.dateTime;
            return org.apache.kafka.streams.KeyValue.pair(Long.toString(o.windowStart), o);
        });
        KTable<String, HighestBid> top = repartition(byWindow, "q7-by-window", hb).groupByKey(Grouped.with(STRING, hb))
            .reduce(Queries::higher, Materialized.<String, HighestBid, KeyValueStore<Bytes, byte[]>>as("q7-top")
                .withKeySerde(STRING).withValueSerde(hb));
        out(top.toStream(), hb);
    }

    /** The higher bid: higher price, then earlier, then smaller auction id, then smaller bidder. */
    static HighestBid higher(HighestBid a, HighestBid b) {
        if (a.price != b.price) {
            return a.price > b.price ? a : b;
        }
        if (a.dateTime != b.dateTime) {
            return a.dateTime < b.dateTime ? a : b;
        }
        if (a.auction != b.auction) {
            return a.auction < b.auction ? a : b;
        }
        return a.bidder <= b.bidder ? a : b;
    }

    static final long Q8_WINDOW = 10_000;

    private void q8() {
        KStream<String, Auction> bySeller = repartition(auctions().selectKey((k, a) -> Long.toString(a.seller)),
            "q8-by-seller", AUCTION);
        // A join window of one window size holds every pair in the same tumbling window; the
        // filter keeps just those.
        KStream<String, NewSeller> joined = persons().join(bySeller, (pr, a) -> {
            NewSeller o = new NewSeller();
            o.id = pr.id;
            o.name = pr.name;
            o.windowStart = Math.floorDiv(pr.dateTime, Q8_WINDOW) * Q8_WINDOW;
            o.auction = Math.floorDiv(a.dateTime, Q8_WINDOW) * Q8_WINDOW == o.windowStart ? a.id : -1;
            return o;
        }, JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(Q8_WINDOW), GRACE),
            StreamJoined.<String, Person, Auction>with(STRING, PERSON, AUCTION).withStoreName("q8-join"));
        out(joined.filter((k, o) -> o.auction >= 0), JsonSerde.of(NewSeller.class));
    }

    private void q17() {
        Serde<PriceAgg> agg = JsonSerde.of(PriceAgg.class);
        KTable<Windowed<String>, PriceAgg> days = bids().groupByKey(Grouped.with(STRING, BID))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofDays(1), GRACE))
            .aggregate(PriceAgg::new, (k, x, a) -> {
                a.count++;
                a.min = Math.min(a.min, x.price);
                a.max = Math.max(a.max, x.price);
                a.sum += x.price;
                return a;
            }, Materialized.<String, PriceAgg, WindowStore<Bytes, byte[]>>as("q17-days")
                .withKeySerde(STRING).withValueSerde(agg));
        out(days.toStream().map((w, a) -> {
            DayStats o = new DayStats();
            o.auction = Long.parseLong(w.key());
            o.day = Instant.ofEpochMilli(w.window().start()).atOffset(ZoneOffset.UTC).toLocalDate().toString();
            o.count = a.count;
            o.min = a.min;
            o.max = a.max;
            o.sum = a.sum;
            o.avg = (double) a.sum / a.count;
            return org.apache.kafka.streams.KeyValue.pair(o.auction + "/" + o.day, o);
        }), JsonSerde.of(DayStats.class));
    }

    /**
     * q18 keeps the last bid of each (bidder, auction) with the Processor API: bids are
     * partitioned by auction, so every pair is already in one task and re-keying needs no
     * repartition topic, which the DSL's groupBy would add.
     */
    private void q18() {
        b.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore("q18-last"), STRING, BID)
            .withCachingEnabled());
        out(bids().process(LastBid::new, "q18-last"), BID);
    }

    private static final class LastBid implements Processor<String, Bid, String, Bid> {
        private ProcessorContext<String, Bid> ctx;
        private KeyValueStore<String, Bid> store;

        @Override
        public void init(ProcessorContext<String, Bid> context) {
            ctx = context;
            store = context.getStateStore("q18-last");
        }

        @Override
        public void process(Record<String, Bid> r) {
            Bid x = r.value();
            String key = x.bidder + "/" + x.auction;
            Bid old = store.get(key);
            if (old == null || x.dateTime >= old.dateTime) {
                store.put(key, x);
                ctx.forward(r.withKey(key));
            }
        }
    }

    private void q20() {
        KTable<String, Auction> cat10 = auctions().filter((k, a) -> a.category == 10)
            .toTable(Materialized.<String, Auction, KeyValueStore<Bytes, byte[]>>as("q20-auctions")
                .withKeySerde(STRING).withValueSerde(AUCTION));
        out(bids().join(cat10, (x, a) -> {
            BidWithAuction o = new BidWithAuction();
            o.auction = x.auction;
            o.bidder = x.bidder;
            o.price = x.price;
            o.channel = x.channel;
            o.url = x.url;
            o.dateTime = x.dateTime;
            o.itemName = a.itemName;
            o.description = a.description;
            o.initialBid = a.initialBid;
            o.reserve = a.reserve;
            o.expires = a.expires;
            o.seller = a.seller;
            o.category = a.category;
            return o;
        }, Joined.with(STRING, BID, AUCTION)), JsonSerde.of(BidWithAuction.class));
    }
}
