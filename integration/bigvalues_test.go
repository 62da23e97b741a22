package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
	"github.com/tarnhq/tarn/internal/topic"
)

// Sizes of the test's values: above Kafka's 1 MiB default, near the 16 MiB default maximum,
// and above it.
const (
	size1MB  = 1_200_000
	size12MB = 12_000_000
	size20MB = 20_000_000
)

// TestLargeValues runs `tarn serve` (a program with a CDC view and a Kafka view that serve
// whole rows) on real Postgres and Kafka, at least once and exactly once: rows of 1.2 MB and
// 12 MB go through the CDC table topic, the stores' changelogs and HTTP intact, and are
// restored from the changelogs after `tarn reset`; 20 MB rows (CDC snapshot and stream) and a
// 20 MB record (Kafka) go to the dead-letter topic with their size and the limit, are counted, and both
// views go on to serve a later small row. A topic that existed with a smaller limit is named
// in a warning at start.
func TestLargeValues(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bigvalues")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/bigvalues").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	t.Run("at-least-once", func(t *testing.T) { testLargeValues(t, bin) })
	t.Run("exactly-once", func(t *testing.T) { testLargeValues(t, bin, "--exactly-once") })
}

func testLargeValues(t *testing.T, bin string, flags ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	pg := testenv.Postgres(t)
	app := fmt.Sprintf("big%d", time.Now().UnixNano()%1e9)

	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE docs (id text PRIMARY KEY, body text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	insert := func(id string, n int) {
		t.Helper()
		if _, err := conn.Exec(ctx, `INSERT INTO docs VALUES ($1, $2)`, id, body(id, n)); err != nil {
			t.Fatal(err)
		}
	}
	// Before the start: the snapshot writes these.
	insert("small", 10)
	insert("r1", size1MB)
	insert("s20", size20MB)

	// The Kafka view's input is the user's topic, made to hold records above tarn's maximum.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(32<<20),
		kgo.MetadataMinAge(250*time.Millisecond))
	blobs := app + "-blobs"
	t.Setenv("BIGVALUES_TOPIC", blobs)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	big := strconv.Itoa(32<<20 + 1024)
	if _, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"max.message.bytes": &big}, blobs); err != nil {
		t.Fatal(err)
	}
	produce := func(id string, n int) {
		t.Helper()
		v, _ := json.Marshal(map[string]string{"id": id, "data": body(id, n)})
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: blobs, Key: []byte(id), Value: v}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", id, err)
		}
	}
	produce("k1", size1MB)
	// A dead-letter topic left by an older tarn, with the broker's default limit: start-up
	// names it and the fix, and dead letters (which carry no large value) still fit.
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic.DLQ(app)); err != nil {
		t.Fatal(err)
	}

	args := append([]string{"--app", app, "--kafka", strings.Join(brokers, ","), "--postgres", pg}, flags...)
	in := startServe(t, bin, args...)
	waitReady(t, in, 2*time.Minute, "readyz")

	// After the start: the replication stream writes these.
	insert("r12", size12MB)
	insert("r20", size20MB)
	insert("after", 10)
	produce("k12", size12MB)
	produce("k20", size20MB)
	produce("k-after", 10)

	servesAll(t, in)
	dead := readDeadLetters(ctx, t, brokers, topic.DLQ(app), 3)
	for _, vk := range [][2]string{{"docs", "s20"}, {"docs", "r20"}, {"blobs", "k20"}} {
		view, key := vk[0], vk[1]
		if code, raw := get(in.base + "/v1/views/" + view + "/keys/" + key); code != http.StatusNotFound {
			t.Errorf("%s %s: got %d %.200s, want 404: it is above the limit", view, key, code, raw)
		}
	}
	for _, key := range []string{"s20", "r20", "k20"} {
		d, ok := dead[key]
		switch {
		case !ok:
			t.Errorf("no dead letter for %s; got %v", key, dead)
		case d.headers["tarn.reason"] != "too-large" || d.headers["tarn.limit"] != strconv.Itoa(topic.DefaultMaxRecordBytes) || d.valueLen != 0:
			t.Errorf("dead letter of %s: headers %v, value %d bytes", key, d.headers, d.valueLen)
		}
		if size, _ := strconv.Atoi(d.headers["tarn.size"]); size < size20MB {
			t.Errorf("dead letter of %s gives size %q, want at least %d", key, d.headers["tarn.size"], size20MB)
		}
	}
	for _, key := range []string{"s20", "r20"} { // from the snapshot and from the stream
		if got := dead[key].headers["tarn.source"]; got != "cdc" {
			t.Errorf("dead letter of %s has tarn.source %q, want cdc", key, got)
		}
	}
	if got := dead["k20"].headers["tarn.view"]; got != "blobs" {
		t.Errorf("dead letter of k20 has tarn.view %q, want blobs", got)
	}
	_, metrics := get(in.base + "/metrics")
	for _, want := range []string{
		`tarn_cdc_dead_letters_total{reason="too-large",slot="tarn_` + app + `",table="public.docs"} 2`,
		`tarn_views_dead_letters_total{reason="too-large",view="blobs"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Every topic tarn created takes records of the maximum.
	created := []string{topic.CDCTable(app, "public", "docs"),
		topic.Changelog(app, "docs", 1, "cdc-public-docs"), topic.Changelog(app, "blobs", 1, "source-blobs")}
	rcs, err := adm.DescribeTopicConfigs(ctx, created...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			t.Errorf("describe %s: %v", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && (c.Value == nil || *c.Value != strconv.Itoa(int(topic.MaxMessageBytes(topic.DefaultMaxRecordBytes)))) {
				t.Errorf("topic %s has max.message.bytes %v", rc.Name, c.MaybeValue())
			}
		}
	}
	for _, want := range []string{"level=WARN", "topic=" + topic.DLQ(app), "max_message_bytes=1048588",
		"--entity-name " + topic.DLQ(app) + " --add-config max.message.bytes=16778240"} {
		if !strings.Contains(in.stderr.String(), want) {
			t.Errorf("tarn's log does not warn about the old dead-letter topic's limit (%q):\n%s", want, tailLines(in.stderr.String(), 20))
		}
	}
	if strings.Contains(in.stderr.String(), "MESSAGE_TOO_LARGE") {
		t.Errorf("tarn logged MESSAGE_TOO_LARGE:\n%s", tailLines(in.stderr.String(), 20))
	}

	// Without its local stores tarn restores them, large values and all, from the changelogs,
	// and rebuilds the CDC source's row state from the table topic.
	in.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-in.exited; err != nil {
		t.Fatalf("tarn serve exited with %v after SIGTERM", err)
	}
	if out, err := exec.Command(bin, "reset", "--data-dir", in.dataDir, "yes").CombinedOutput(); err != nil {
		t.Fatalf("tarn reset: %v\n%s", err, out)
	}
	again := startServe(t, bin, append(args, "--data-dir", in.dataDir)...)
	waitServe(t, again, 2*time.Minute, "readyz after reset", func() bool { code, _ := get(again.base + "/readyz"); return code == http.StatusOK })
	servesAll(t, again)
}

// servesAll waits until in serves every value of the test that fits, intact.
func servesAll(t *testing.T, in *instance) {
	t.Helper()
	began := time.Now()
	defer func() { t.Logf("%s served every value in %s", in.base, time.Since(began).Round(time.Millisecond)) }()
	for view, keys := range map[string]map[string]int{
		"docs":  {"small": 10, "r1": size1MB, "r12": size12MB, "after": 10},
		"blobs": {"k1": size1MB, "k12": size12MB, "k-after": 10},
	} {
		field := map[string]string{"docs": "body", "blobs": "data"}[view]
		for key, n := range keys {
			waitServe(t, in, 2*time.Minute, view+" "+key, func() bool {
				code, raw := get(in.base + "/v1/views/" + view + "/keys/" + key)
				if code != http.StatusOK {
					return false
				}
				var got struct{ Value map[string]string }
				if err := json.Unmarshal([]byte(raw), &got); err != nil {
					t.Fatalf("%s %s: %v", view, key, err)
				}
				if got.Value[field] != body(key, n) {
					t.Fatalf("%s %s: served %d bytes, not the %d written", view, key, len(got.Value[field]), n)
				}
				return true
			})
		}
	}
}

// body is the deterministic value of n bytes of key id.
func body(id string, n int) string {
	if n < len(id) {
		return id[:n]
	}
	return id + strings.Repeat("x", n-len(id))
}

type deadLetter struct {
	headers  map[string]string
	valueLen int
}

// readDeadLetters reads the dead-letter topic until it holds n records, by key.
func readDeadLetters(ctx context.Context, t *testing.T, brokers []string, dlq string, n int) map[string]deadLetter {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(dlq),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := map[string]deadLetter{}
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d dead letters from %s: %v", len(got), n, dlq, got)
		}
		fs.EachRecord(func(r *kgo.Record) {
			d := deadLetter{headers: map[string]string{}, valueLen: len(r.Value)}
			for _, h := range r.Headers {
				d.headers[h.Key] = string(h.Value)
			}
			got[string(r.Key)] = d
		})
	}
	return got
}
