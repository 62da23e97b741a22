package dev.tarn.bench;

import com.fasterxml.jackson.annotation.JsonPropertyOrder;

/**
 * The Nexmark events as the generator (bench/nexmark) writes them, and the output record of each
 * query. bench/README.md documents every format; field order here is the order written.
 */
final class Model {
    private Model() {}

    @JsonPropertyOrder({"id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"})
    public static final class Person {
        public long id;
        public String name;
        public String emailAddress;
        public String creditCard;
        public String city;
        public String state;
        public long dateTime;
        public String extra;
    }

    @JsonPropertyOrder({"id", "itemName", "description", "initialBid", "reserve", "dateTime", "expires",
        "seller", "category", "extra"})
    public static final class Auction {
        public long id;
        public String itemName;
        public String description;
        public long initialBid;
        public long reserve;
        public long dateTime;
        public long expires;
        public long seller;
        public long category;
        public String extra;
    }

    @JsonPropertyOrder({"auction", "bidder", "price", "channel", "url", "dateTime", "extra"})
    public static final class Bid {
        public long auction;
        public long bidder;
        public long price;
        public String channel;
        public String url;
        public long dateTime;
        public String extra;
    }

    /** q1: a bid with its price converted to euros (price * 0.908, a double). */
    @JsonPropertyOrder({"auction", "bidder", "price", "channel", "url", "dateTime", "extra"})
    public static final class EuroBid {
        public long auction;
        public long bidder;
        public double price;
        public String channel;
        public String url;
        public long dateTime;
        public String extra;

        static EuroBid of(Bid b) {
            EuroBid e = new EuroBid();
            e.auction = b.auction;
            e.bidder = b.bidder;
            e.price = b.price * 0.908;
            e.channel = b.channel;
            e.url = b.url;
            e.dateTime = b.dateTime;
            e.extra = b.extra;
            return e;
        }
    }

    /** q2. */
    @JsonPropertyOrder({"auction", "price"})
    public static final class AuctionPrice {
        public long auction;
        public long price;
    }

    /** q3: a seller in OR, ID or CA with one of their auctions of category 10. */
    @JsonPropertyOrder({"name", "city", "state", "id"})
    public static final class LocalItem {
        public String name;
        public String city;
        public String state;
        public long id;
    }

    /** q5: the auction with the most bids in one hopping window, and that count. */
    @JsonPropertyOrder({"windowStart", "windowEnd", "auction", "count"})
    public static final class HotItem {
        public long windowStart;
        public long windowEnd;
        public long auction;
        public long count;
    }

    /** q7: the highest bid of one tumbling window. */
    @JsonPropertyOrder({"windowStart", "windowEnd", "auction", "bidder", "price", "dateTime"})
    public static final class HighestBid {
        public long windowStart;
        public long windowEnd;
        public long auction;
        public long bidder;
        public long price;
        public long dateTime;
    }

    /** q8: a new person who opened an auction in the tumbling window they registered in. */
    @JsonPropertyOrder({"id", "name", "windowStart", "auction"})
    public static final class NewSeller {
        public long id;
        public String name;
        public long windowStart;
        public long auction;
    }

    /** q17: the running statistics of one auction's bids on one UTC day. */
    @JsonPropertyOrder({"auction", "day", "count", "min", "max", "sum", "avg"})
    public static final class DayStats {
        public long auction;
        public String day;
        public long count;
        public long min;
        public long max;
        public long sum;
        public double avg;
    }

    /** q17's aggregate in its window store. */
    @JsonPropertyOrder({"count", "min", "max", "sum"})
    public static final class PriceAgg {
        public long count;
        public long min = Long.MAX_VALUE;
        public long max = Long.MIN_VALUE;
        public long sum;
    }

    /** q20: a bid on an auction of category 10, with the auction's fields. */
    @JsonPropertyOrder({"auction", "bidder", "price", "channel", "url", "dateTime", "itemName", "description",
        "initialBid", "reserve", "expires", "seller", "category"})
    public static final class BidWithAuction {
        public long auction;
        public long bidder;
        public long price;
        public String channel;
        public String url;
        public long dateTime;
        public String itemName;
        public String description;
        public long initialBid;
        public long reserve;
        public long expires;
        public long seller;
        public long category;
    }
}
