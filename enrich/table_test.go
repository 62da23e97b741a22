package enrich_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tarnhq/tarn/cdc"
	"github.com/tarnhq/tarn/enrich"
	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
	"github.com/tarnhq/tarn/views"
	"github.com/twmb/franz-go/pkg/kgo"
)

type user struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
	Tier string `json:"tier"`
}

type click struct {
	ID     string `json:"id"`
	UserID int    `json:"user_id"`
}

type enriched struct {
	Click click `json:"click"`
	User  *user `json:"user"`
}

// pgEnv is a test's own Postgres database with a CDC source feeding its tables' topics.
type pgEnv struct {
	url  string
	conn *pgx.Conn
}

func newPG(t *testing.T) *pgEnv {
	url := testenv.Postgres(t)
	c, err := pgx.Connect(context.Background(), url)
	must(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return &pgEnv{url: url, conn: c}
}

func (p *pgEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := p.conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// startCDC runs a CDC source of the tables into the app's table topics until the test ends.
func startCDC(t *testing.T, k *kafkaEnv, p *pgEnv, partitions int32, tables ...string) {
	src, err := cdc.New(cdc.Config{
		PostgresURL: p.url, App: k.app, Tables: tables, Brokers: k.brokers, Partitions: partitions,
		KafkaOptions: []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)}, Dir: t.TempDir(),
		BatchInterval: 20 * time.Millisecond, StatusInterval: time.Second, HeartbeatInterval: time.Second,
		Logger: quietLog(),
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cdc: %v", err)
		}
	})
}

// users is the test's own model of the users table: what Postgres holds.
type users map[int]user

func (u users) rowOf(id int) string {
	row, ok := u[id]
	if !ok {
		return "null"
	}
	raw, _ := json.Marshal(row)
	return string(raw)
}

// clicksFor produces n clicks (ids prefix0..) for user ids 1..maxUser and returns them.
func clicksFor(k *kafkaEnv, topicName, prefix string, n, maxUser int) []click {
	var cs []click
	var recs []*kgo.Record
	for i := range n {
		c := click{ID: prefix + strconv.Itoa(i), UserID: 1 + i%maxUser}
		cs = append(cs, c)
		recs = append(recs, jsonRecord(topicName, c.ID, time.Now(), c))
	}
	k.produce(recs...)
	return cs
}

// checkEnriched reads len(cs) enriched clicks and compares each with the row of its user.
func checkEnriched(t *testing.T, r *reader, cs []click, rows users) {
	t.Helper()
	want := map[string]string{}
	for _, c := range cs {
		want[c.ID] = rows.rowOf(c.UserID)
	}
	got := map[string]string{}
	for _, rec := range r.read(len(cs)) {
		var e enriched
		must(t, json.Unmarshal(rec.Value, &e))
		raw, _ := json.Marshal(e.User)
		got[e.Click.ID] = string(raw)
		if string(rec.Key) != strconv.Itoa(e.Click.UserID) {
			t.Errorf("enriched click %s is keyed %q, want its user id %d", e.Click.ID, rec.Key, e.Click.UserID)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("enriched clicks differ: %v", diff(got, want))
	}
}

// Clicks enriched with user attributes from a CDC'd users table: the clicks topic has another
// partition count than the table, so the join repartitions by user id; users change and are
// deleted between two rounds of clicks, the second round on a new instance that must restore
// the table copy; a left join emits null for unknown users.
func TestClicksEnrichedWithUsers(t *testing.T) {
	k := newKafkaEnv(t)
	p := newPG(t)
	p.exec(t, "CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL, tier text NOT NULL)")
	rows := users{}
	for i := 1; i <= 20; i++ {
		rows[i] = user{ID: i, Name: "user-" + strconv.Itoa(i), Tier: []string{"gold", "silver"}[i%2]}
		p.exec(t, "INSERT INTO users VALUES ($1, $2, $3)", i, rows[i].Name, rows[i].Tier)
	}
	startCDC(t, k, p, 3, "public.users")
	table := k.reader(topic.CDCTable(k.app, "public", "users"))
	table.read(3 + 20) // the snapshot: a truncate marker per partition, then the rows

	clicks := k.topic("clicks", 4)
	out := k.app + "-enriched"
	v, err := views.Define("clicks", func(b *views.Builder) {
		s := views.Source(b, clicks, views.JSON[click]())
		enrich.JoinTable(s, "with-user", enrich.TableJoin[click, user, enriched]{
			Table: enrich.CDCTable[user]("public", "users"),
			Key:   func(_ string, c click) string { return strconv.Itoa(c.UserID) },
			Mode:  enrich.Left,
			Join:  func(_ string, c click, u *user) enriched { return enriched{Click: c, User: u} },
		}).To(out, views.JSON[enriched]())
	})
	must(t, err)
	outputs := k.reader(out)

	first := k.runtime(v)
	cs := clicksFor(k, clicks, "a", 100, 25)
	checkEnriched(t, outputs, cs, rows)
	first.stop(t)

	for i := 1; i <= 5; i++ {
		u := rows[i]
		u.Name = "renamed-" + strconv.Itoa(i)
		rows[i] = u
		p.exec(t, "UPDATE users SET name = $2 WHERE id = $1", i, u.Name)
	}
	for i := 6; i <= 8; i++ {
		delete(rows, i)
		p.exec(t, "DELETE FROM users WHERE id = $1", i)
	}
	rows[21] = user{ID: 21, Name: "user-21", Tier: "gold"}
	p.exec(t, "INSERT INTO users VALUES (21, 'user-21', 'gold')")
	table.read(5 + 3 + 1) // the changes are in the table topic before the next clicks

	// A new instance with empty local state: it restores the table copy from its changelog
	// and catches it up with the changes before joining.
	k.runtime(v)
	cs = clicksFor(k, clicks, "b", 100, 25)
	checkEnriched(t, outputs, cs, rows)

	// Changes while the instance runs: each click produced after its change reached the
	// table topic sees it.
	for round := range 3 {
		id := 1 + round
		u := rows[id]
		u.Tier = "platinum-" + strconv.Itoa(round)
		rows[id] = u
		p.exec(t, "UPDATE users SET tier = $2 WHERE id = $1", id, u.Tier)
		table.read(1)
		cs = clicksFor(k, clicks, fmt.Sprintf("c%d-", round), 30, 25)
		checkEnriched(t, outputs, cs, rows)
	}
}

// A stream–table join without repartitioning refuses to start when the stream and the table
// have different partition counts, naming both topics and counts.
func TestJoinTableRefusesUnequalPartitions(t *testing.T) {
	k := newKafkaEnv(t)
	tbl := k.topic("regions", 3)
	events := k.topic("events", 2)
	v, err := views.Define("unequal", func(b *views.Builder) {
		s := views.Source(b, events, views.JSON[click]())
		enrich.JoinTable(s, "with-region", enrich.TableJoin[click, user, enriched]{
			Table: enrich.TopicTable(tbl, views.JSON[user]()),
			Join:  func(_ string, c click, u *user) enriched { return enriched{Click: c, User: u} },
		}).To(k.app+"-out", views.JSON[enriched]())
	})
	must(t, err)
	r := k.runtime(v)
	err = <-r.done
	r.cancel, r.done = nil, nil
	if !errors.Is(err, views.ErrCoPartition) {
		t.Fatalf("Run = %v, want ErrCoPartition", err)
	}
	for _, s := range []string{tbl + " has 3", events + " has 2"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}
