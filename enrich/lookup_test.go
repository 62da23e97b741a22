package enrich_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

// visit is a page visit of a session; Seq orders a session's visits.
type visit struct {
	Session string `json:"session"`
	Seq     int    `json:"seq"`
	UserID  int    `json:"user_id"`
}

type visitWithUser struct {
	Visit visit `json:"visit"`
	User  *user `json:"user"`
}

// countingFetcher counts lookups per key and fails every lookup of one key.
type countingFetcher struct {
	mu    sync.Mutex
	calls map[string]int
	fetch enrich.Fetcher[user]
	fail  string
}

func (f *countingFetcher) Fetch(ctx context.Context, key string) (user, bool, error) {
	f.mu.Lock()
	f.calls[key]++
	f.mu.Unlock()
	if key == f.fail {
		return user{}, false, errors.New("injected failure")
	}
	// A slow store: lookups of a batch overlap, so order is kept only if JoinLookup keeps it.
	time.Sleep(2 * time.Millisecond)
	return f.fetch(ctx, key)
}

func (f *countingFetcher) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

// Lookups in Postgres behind the cache: a row changed in Postgres is seen by the next lookup
// once its CDC change arrived, misses are cached (no second query), a lookup that keeps
// failing goes to the dead-letter topic and is never emitted as a miss, and the records of
// one key come out in their input order although lookups overlap.
func TestLookupCacheFreshAndOrdered(t *testing.T) {
	k := newKafkaEnv(t)
	p := newPG(t)
	p.exec(t, "CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL, tier text NOT NULL)")
	rows := users{}
	for i := 1; i <= 50; i++ {
		rows[i] = user{ID: i, Name: "user-" + strconv.Itoa(i), Tier: "gold"}
		p.exec(t, "INSERT INTO users VALUES ($1, $2, $3)", i, rows[i].Name, rows[i].Tier)
	}
	startCDC(t, k, p, 2, "public.users")
	changes := k.reader(topic.CDCTable(k.app, "public", "users"))
	changes.read(2 + 50)
	pool, err := pgxpool.New(context.Background(), p.url)
	must(t, err)
	t.Cleanup(pool.Close)
	f := &countingFetcher{calls: map[string]int{}, fail: "666",
		fetch: enrich.PostgresJSON[user](pool, "SELECT row_to_json(u) FROM users u WHERE id = $1::text::int")}
	reg := prometheus.NewRegistry()
	visits := k.topic("visits", 2)
	out := k.app + "-visits-with-user"
	cdcTopic := views.CDCTableTopic("public", "users")
	v, err := views.Define("visits", func(b *views.Builder) {
		s := views.Source(b, visits, views.JSON[visit]())
		enrich.JoinLookup(s, "user", enrich.Lookup[visit, user, visitWithUser]{
			Fetch:   f.Fetch,
			Key:     func(_ string, v visit) string { return strconv.Itoa(v.UserID) },
			Mode:    enrich.Left,
			Join:    func(_ string, v visit, u *user) visitWithUser { return visitWithUser{Visit: v, User: u} },
			Changes: &cdcTopic, NegativeTTL: time.Hour, Attempts: 3, Backoff: time.Millisecond, Concurrency: 8,
			Registerer: reg,
		}).To(out, views.JSON[visitWithUser]())
	})
	must(t, err)
	k.runtime(v)
	outputs, dead := k.reader(out), k.reader(k.app+".dlq")
	seq := map[string]int{}
	send := func(session string, userIDs ...int) []visit {
		var vs []visit
		var recs []*kgo.Record
		for _, id := range userIDs {
			seq[session]++
			vi := visit{Session: session, Seq: seq[session], UserID: id}
			vs = append(vs, vi)
			recs = append(recs, jsonRecord(visits, session, time.Now(), vi))
		}
		k.produce(recs...)
		return vs
	}
	// check reads the outputs of vs (none for failing lookups) and compares them with rows,
	// and the order of each session's visits with their sequence.
	check := func(vs []visit) {
		t.Helper()
		want, n := map[string]string{}, 0
		for _, vi := range vs {
			if strconv.Itoa(vi.UserID) != f.fail {
				want[vi.Session+"/"+strconv.Itoa(vi.Seq)] = rows.rowOf(vi.UserID)
				n++
			}
		}
		got, last := map[string]string{}, map[string]int{}
		for _, r := range outputs.read(n) {
			var o visitWithUser
			must(t, json.Unmarshal(r.Value, &o))
			raw, _ := json.Marshal(o.User)
			got[o.Visit.Session+"/"+strconv.Itoa(o.Visit.Seq)] = string(raw)
			if o.Visit.Seq <= last[o.Visit.Session] {
				t.Errorf("session %s: visit %d came after visit %d", o.Visit.Session, o.Visit.Seq, last[o.Visit.Session])
			}
			last[o.Visit.Session] = o.Visit.Seq
		}
		for key, w := range want {
			if got[key] != w {
				t.Errorf("visit %s joined %s, want %s", key, got[key], w)
			}
		}
	}

	// Many sessions, each visiting users in a scrambled order, plus an unknown user (999)
	// and one whose lookups fail (666).
	var first []visit
	for s := range 8 {
		var ids []int
		for i := range 30 {
			ids = append(ids, 1+(i*7+s*3)%50)
		}
		first = append(first, send("s"+strconv.Itoa(s), append(ids, 999, 666)...)...)
	}
	check(first)
	failed := dead.read(8)
	for _, r := range failed {
		if h := headers(r); h["tarn.reason"] != "lookup" || h["tarn.step"] != "user" {
			t.Errorf("dead letter headers %v", h)
		}
	}
	// One lookup per key and batch (batches may split the records), three attempts each.
	if got := f.count("666"); got == 0 || got%3 != 0 {
		t.Errorf("failing key was tried %d times, want a multiple of 3 attempts", got)
	}

	// A changed row: the next lookup after its CDC change sees it; a cached miss is not
	// looked up again; a cached row neither.
	rows[1] = user{ID: 1, Name: "renamed", Tier: "platinum"}
	p.exec(t, "UPDATE users SET name = 'renamed', tier = 'platinum' WHERE id = 1")
	changes.read(1)
	before999, before2 := f.count("999"), f.count("2")
	check(send("after", 1, 999, 2))
	if f.count("999") != before999 {
		t.Errorf("the miss of user 999 was looked up again (%d → %d); negative caching failed", before999, f.count("999"))
	}
	if f.count("2") != before2 {
		t.Errorf("cached user 2 was looked up again")
	}
	hits := lookupCount(t, reg, "hit") + lookupCount(t, reg, "negative_hit")
	misses, coalesced := lookupCount(t, reg, "miss"), lookupCount(t, reg, "coalesced")
	t.Logf("lookups: %.0f hits, %.0f misses, %.0f coalesced", hits, misses, coalesced)
	if hits == 0 || misses == 0 {
		t.Errorf("hit and miss counters: %v and %v", hits, misses)
	}
}

// lookupCount reads tarn_enrich_lookups_total of one result.
func lookupCount(t *testing.T, reg *prometheus.Registry, result string) float64 {
	mfs, err := reg.Gather()
	must(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "tarn_enrich_lookups_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
