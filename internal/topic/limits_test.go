package topic

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLimitsCheck: an existing topic whose max.message.bytes is below the configured maximum
// keeps its smaller limit, which Of and BatchBytes then give, and start-up warns naming the
// topic, its limit and the command that raises it; topics created by tarn's rule need nothing.
func TestLimitsCheck(t *testing.T) {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	const max = DefaultMaxRecordBytes
	old := "1048588" // Kafka's default message.max.bytes, as on a topic created before tarn set it
	for name, configs := range map[string]map[string]*string{
		"old": {MaxMessageBytesKey: &old},
		"new": {MaxMessageBytesKey: MaxMessageBytesValue(max)},
	} {
		if _, err := adm.CreateTopic(ctx, 1, 1, configs, name); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	l := NewLimits(max)
	if err := l.Check(ctx, adm, slog.New(slog.NewTextHandler(&logs, nil)), "old", "new"); err != nil {
		t.Fatal(err)
	}
	if got, want := l.Of("old"), 1048588-framing; got != want {
		t.Errorf("Of(old) = %d, want %d", got, want)
	}
	if got := l.Of("new"); got != max {
		t.Errorf("Of(new) = %d, want %d", got, max)
	}
	if got := l.Min(); got != 1048588-framing {
		t.Errorf("Min = %d, want the old topic's limit", got)
	}
	if got := l.BatchBytes("old"); got != 1048588 {
		t.Errorf("BatchBytes(old) = %d, want its max.message.bytes", got)
	}
	if got := l.BatchBytes("elsewhere"); got != MaxMessageBytes(max) {
		t.Errorf("BatchBytes of an unchecked topic = %d, want %d", got, MaxMessageBytes(max))
	}
	for _, want := range []string{"level=WARN", "topic=old", "max_message_bytes=1048588",
		"--entity-name old --add-config max.message.bytes=" + strconv.Itoa(int(MaxMessageBytes(max)))} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "topic=new") {
		t.Errorf("warned about a topic with the right limit:\n%s", logs.String())
	}
}

// TestMaxMessageBytesFitsARecordOfTheMaximum: a record whose RecordSize is the maximum, with
// more headers than tarn puts on dead letters, is taken by a topic created with
// MaxMessageBytes; a larger one is refused by the broker (the producer's own batch limit is
// raised so that the broker decides) with an error IsTooLarge recognises.
func TestMaxMessageBytesFitsARecordOfTheMaximum(t *testing.T) {
	ctx := context.Background()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const max = MinRecordBytes
	l := NewLimits(max)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(2*max),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // sizes as they are
		kgo.RecordRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{MaxMessageBytesKey: MaxMessageBytesValue(max)}, "t"); err != nil {
		t.Fatal(err)
	}
	var hs []kgo.RecordHeader
	for i := range 12 {
		hs = append(hs, kgo.RecordHeader{Key: fmt.Sprintf("tarn.h%d", i), Value: []byte("0123456789")})
	}
	r := &kgo.Record{Topic: "t", Key: []byte("key"), Headers: hs}
	r.Value = make([]byte, l.Of("t")-RecordSize(r))
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("record of the maximum size: %v", err)
	}
	over := &kgo.Record{Topic: "t", Key: r.Key, Headers: hs, Value: make([]byte, len(r.Value)+framing)}
	err = cl.ProduceSync(ctx, over).FirstErr()
	if !IsTooLarge(err) {
		t.Fatalf("record above the topic's max.message.bytes: %v, want %v", err, kerr.MessageTooLarge)
	}
}

func TestValidateMaxRecordBytes(t *testing.T) {
	for n, ok := range map[int32]bool{MinRecordBytes - 1: false, MinRecordBytes: true, DefaultMaxRecordBytes: true, MaxRecordBytes: true, MaxRecordBytes + 1: false} {
		if err := ValidateMaxRecordBytes(n); (err == nil) != ok {
			t.Errorf("ValidateMaxRecordBytes(%d) = %v", n, err)
		}
	}
}
