package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/localpg"
	"github.com/tarnhq/tarn/internal/testenv"
)

// TestContainerPostgres starts Postgres in a container through the harness (skipping when no
// Docker engine answers) and checks that it runs with the harness's replication settings and
// decodes changes with pgoutput: the plugin a trimmed image could have lost.
func TestContainerPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := testenv.PostgresContainer(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, s := range localpg.Settings {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", s.Name).Scan(&got); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if got != s.Value {
			t.Errorf("%s = %q in the container, want %q", s.Name, got, s.Value)
		}
	}
	repl := startPgoutput(ctx, t, conn, url, "boxed")
	defer repl.Close(ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO boxed VALUES (7, 'seven')"); err != nil {
		t.Fatal(err)
	}
	if got := nextInsert(ctx, t, repl); got != "seven" {
		t.Fatalf("replicated row has name %q, want seven", got)
	}
}

// nextInsert reads the replication stream up to the first insert and returns its second column.
func nextInsert(ctx context.Context, t *testing.T, repl *pgconn.PgConn) string {
	t.Helper()
	for {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
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
			return string(ins.Tuple.Columns[1].Data)
		}
	}
}

// TestContainerKafka starts Kafka in a container through the harness (skipping when no Docker
// engine answers) and checks that it runs the harness's broker settings, creates a compacted
// topic with 3 partitions and carries records through it.
func TestContainerKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := testenv.KafkaContainer(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// A broker setting the image's defaults would not have: the harness's came through its env.
	listed, err := adm.ListBrokers(ctx)
	if err != nil || len(listed) != 1 {
		t.Fatalf("list brokers: %v %v", listed, err)
	}
	bcfg, err := adm.DescribeBrokerConfigs(ctx, listed[0].NodeID)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := bcfg.On(strconv.Itoa(int(listed[0].NodeID)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := configValue(bc, "auto.create.topics.enable"); got != "false" {
		t.Fatalf("auto.create.topics.enable = %q in the container, want false", got)
	}

	topic := "boxed-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	compact := "compact"
	res, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{"cleanup.policy": &compact}, topic)
	if err != nil || res.Err != nil {
		t.Fatalf("create topic: %v %v", err, res.Err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := configs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := configValue(tc, "cleanup.policy"); got != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", got)
	}
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(details[topic].Partitions); n != 3 {
		t.Fatalf("partitions = %d, want 3", n)
	}

	r := &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("in a box")}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("no record consumed before the timeout")
		}
		fetches.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		if recs := fetches.Records(); len(recs) > 0 {
			if string(recs[0].Value) != "in a box" {
				t.Fatalf("consumed %q, want %q", recs[0].Value, "in a box")
			}
			return
		}
	}
}
