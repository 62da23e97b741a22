package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

// TestSmokeKafka proves the broker is a real Kafka: topic configs round-trip through the admin
// API, and 10,000 records go through a consumer group.
func TestSmokeKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := testenv.Kafka(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	topic := "smoke-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	compact := "compact"
	res, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"cleanup.policy": &compact}, topic)
	if err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := configValue(cfg, "cleanup.policy"); got != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", got)
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(details[topic].Partitions); n != 3 {
		t.Fatalf("partitions = %d, want 3", n)
	}

	const n = 10000
	var wg sync.WaitGroup
	var produceErr error
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		wg.Add(1)
		r := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: []byte(fmt.Sprintf("value-%d", i))}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				produceErr = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if produceErr != nil {
		t.Fatalf("produce: %v", produceErr)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(topic+"-group"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	seen := make(map[string]bool, n)
	perPartition := map[int32]int{}
	for len(seen) < n {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records before timeout", len(seen), n)
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			if want := "value-" + string(r.Key); string(r.Value) != want {
				t.Fatalf("record %q has value %q, want %q", r.Key, r.Value, want)
			}
			seen[string(r.Key)] = true
			perPartition[r.Partition]++
		})
	}
	if len(perPartition) != 3 {
		t.Fatalf("records landed in %d partitions, want 3: %v", len(perPartition), perPartition)
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit offsets: %v", err)
	}
}

func configValue(rc kadm.ResourceConfig, key string) string {
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

// TestSmokePostgres proves the server does logical replication: rows inserted after a pgoutput
// slot is created arrive through pglogrepl.
func TestSmokePostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Postgres(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	repl := startPgoutput(ctx, t, conn, url, "smoke")
	defer repl.Close(ctx)

	const rows = 100
	if _, err := conn.Exec(ctx, "INSERT INTO smoke SELECT g, 'row ' || g FROM generate_series(1, $1) g", rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for len(got) < rows {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive after %d rows: %v", len(got), err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			continue
		}
		if len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		if ins, ok := m.(*pglogrepl.InsertMessage); ok {
			name := string(ins.Tuple.Columns[1].Data)
			if !strings.HasPrefix(name, "row ") {
				t.Fatalf("unexpected row %q", name)
			}
			got[name] = true
		}
	}
}

// startPgoutput creates table (id int PRIMARY KEY, name text), a publication of it and a
// temporary pgoutput slot, and starts replication; rows inserted afterwards arrive on the
// returned connection, which the caller closes.
func startPgoutput(ctx context.Context, t *testing.T, conn *pgx.Conn, url, table string) *pgconn.PgConn {
	t.Helper()
	for _, q := range []string{
		"CREATE TABLE " + table + " (id int PRIMARY KEY, name text NOT NULL)",
		"CREATE PUBLICATION " + table + "_pub FOR TABLE " + table,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	repl, err := pgconn.Connect(ctx, url+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	slot := table + "_" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	created, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		repl.Close(ctx)
		t.Fatalf("create pgoutput slot: %v", err)
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		repl.Close(ctx)
		t.Fatal(err)
	}
	err = pglogrepl.StartReplication(ctx, repl, slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + table + "_pub'"},
	})
	if err != nil {
		repl.Close(ctx)
		t.Fatalf("start replication: %v", err)
	}
	return repl
}
