package views

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tarnhq/tarn/internal/topic"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTooLargeOutputIsDeadLettered: a record above its output topic's limit is not produced;
// the input that made it goes to the dead-letter topic with its size and the limit and no
// value, and the records after it are produced as usual.
func TestTooLargeOutputIsDeadLettered(t *testing.T) {
	v, err := Define("copy", func(b *Builder) {
		Source(b, "in", JSON[string]()).To("out", JSON[string]())
	})
	must(t, err)
	d := newDriver(v, 1)
	d.env.limits = topic.NewLimits(topic.MinRecordBytes)
	big := `"` + strings.Repeat("x", topic.MinRecordBytes) + `"`
	must(t, d.input(&kgo.Record{Topic: "in", Key: []byte("big"), Value: []byte(big)}))
	must(t, d.input(&kgo.Record{Topic: "in", Key: []byte("small"), Value: []byte(`"y"`)}))
	must(t, d.flush())
	var outs []string
	var dead []*kgo.Record
	for _, r := range d.out {
		if r.Topic == d.env.dlqTopic() {
			dead = append(dead, r)
		} else {
			outs = append(outs, string(r.Key))
		}
	}
	if strings.Join(outs, ",") != "small" {
		t.Errorf("produced %v, want only small", outs)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	h := headers(dead[0])
	want := map[string]string{"tarn.reason": "too-large", "tarn.size": strconv.Itoa(len("big") + len(big)),
		"tarn.limit": strconv.Itoa(topic.MinRecordBytes), "tarn.target": "out", "tarn.topic": "in", "tarn.offset": "0"}
	for k, w := range want {
		if h[k] != w {
			t.Errorf("dead letter header %s = %q, want %q", k, h[k], w)
		}
	}
	if string(dead[0].Key) != "big" || dead[0].Value != nil {
		t.Errorf("dead letter key %q with %d value bytes, want key big and no value", dead[0].Key, len(dead[0].Value))
	}
}

// TestDeadLetterOfLargeInputOmitsValue: a record dead-lettered for another reason (here an
// undecodable one) whose value would not fit the dead-letter topic loses its value, whose
// size is given instead, so that the dead letter itself is not refused.
func TestDeadLetterOfLargeInputOmitsValue(t *testing.T) {
	v, err := Define("copy", func(b *Builder) {
		Source(b, "in", JSON[int]()).To("out", JSON[int]())
	})
	must(t, err)
	d := newDriver(v, 1)
	d.env.limits = topic.NewLimits(topic.MinRecordBytes)
	big := strings.Repeat("x", topic.MinRecordBytes)
	must(t, d.input(&kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte(big)}))
	must(t, d.flush())
	if len(d.out) != 1 {
		t.Fatalf("%d records out, want one dead letter", len(d.out))
	}
	r := d.out[0]
	h := headers(r)
	if h["tarn.reason"] != "decode" || h["tarn.value-bytes"] != strconv.Itoa(len(big)) || r.Value != nil {
		t.Errorf("dead letter: headers %v, %d value bytes; want reason decode, tarn.value-bytes %d and no value", h, len(r.Value), len(big))
	}
}
