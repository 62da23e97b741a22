package cdc

import (
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tarnhq/tarn/internal/topic"
)

// TestTooLargeRowIsDeadLettered: a row change above its table topic's limit is replaced by a
// dead letter with its key, CDC headers, size and limit but no value, and counted; one within
// the limit is left as it is.
func TestTooLargeRowIsDeadLettered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, "slot")
	if err != nil {
		t.Fatal(err)
	}
	d := tooLarge{limits: topic.NewLimits(topic.MinRecordBytes), max: topic.MinRecordBytes, dlq: "app.dlq", dlqParts: 2,
		tables: map[string]string{"app.cdc.public.docs": "public.docs"}, counter: m.deadLetters,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := txnHeaders{lsn: []byte("0/16B3748"), commitTime: []byte("2026-12-04T00:00:00Z"), xid: []byte("770")}
	small := h.record("app.cdc.public.docs", 3, []byte("a"), []byte(`{"id":"a"}`), OpInsert, 0)
	if got := d.check(small); got != nil {
		t.Fatalf("a small row was dead-lettered: %v", got)
	}
	row := []byte(`{"id":"b","body":"` + strings.Repeat("x", topic.MinRecordBytes) + `"}`)
	big := h.record("app.cdc.public.docs", 3, []byte("b"), row, OpUpdate, 1)
	dl := d.check(big)
	if dl == nil {
		t.Fatal("a row above the limit was not dead-lettered")
	}
	got := map[string]string{}
	for _, x := range dl.Headers {
		got[x.Key] = string(x.Value)
	}
	want := map[string]string{"tarn.reason": "too-large", "tarn.source": "cdc", "tarn.table": "public.docs",
		"tarn.target": "app.cdc.public.docs", "tarn.size": strconv.Itoa(topic.RecordSize(big)),
		"tarn.limit": strconv.Itoa(topic.MinRecordBytes), HeaderLSN: "0/16B3748", HeaderOp: "update", HeaderSeq: "1"}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("header %s = %q, want %q", k, got[k], w)
		}
	}
	if dl.Topic != "app.dlq" || string(dl.Key) != "b" || dl.Value != nil || dl.Partition != big.Partition%2 {
		t.Errorf("dead letter %s/%d key %q with %d value bytes", dl.Topic, dl.Partition, dl.Key, len(dl.Value))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "tarn_cdc_dead_letters_total" {
			for _, c := range mf.GetMetric() {
				counted += c.GetCounter().GetValue()
			}
		}
	}
	if counted != 1 {
		t.Errorf("tarn_cdc_dead_letters_total = %v, want 1", counted)
	}
}
