package outputs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestReadTransactions writes committed and aborted transactions and plain records to a real
// Kafka, and checks that Read returns exactly the committed and plain ones and ends although
// the partitions end with transaction markers.
func TestReadTransactions(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var suffix [4]byte
	rand.Read(suffix[:])
	name := "outputs-" + hex.EncodeToString(suffix[:])
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250 * time.Millisecond)}
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 3, -1, nil, name); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	plain, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(name))...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for i := range 10 {
		k := "plain-" + strconv.Itoa(i)
		want[k] = true
		if err := plain.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(`{}`)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(name), kgo.TransactionalID(name))...)
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	for round, commit := range []bool{true, false, true, false} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range 7 {
			k := "txn-" + strconv.Itoa(round) + "-" + strconv.Itoa(i)
			want[k] = commit
			if err := txn.ProduceSync(ctx, &kgo.Record{Key: []byte(k), Value: []byte(`{}`)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]int{}
	err = Read(ctx, brokers, name, func(r *kgo.Record) error {
		got[string(r.Key)]++
		return nil
	}, kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for k, committed := range want {
		if n := got[k]; (committed && n != 1) || (!committed && n != 0) {
			t.Errorf("record %s read %d times; committed %v", k, n, committed)
		}
	}
	if len(got) != 24 {
		t.Errorf("read %d distinct records, want the 24 committed or plain ones", len(got))
	}
}
