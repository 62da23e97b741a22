package tarn

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tarn.yaml")
	os.WriteFile(file, []byte("app: from-file\npartitions: 6\nkafka: [a:9092, b:9092]\nhttp: 0.0.0.0:1\n"), 0o644)
	c, _, err := loadConfig("serve", []string{"--config", file, "--http", "127.0.0.1:9"},
		[]string{"TARN_PARTITIONS=12", "TARN_LOG_LEVEL=debug"})
	if err != nil {
		t.Fatal(err)
	}
	if c.App != "from-file" || c.Partitions != 12 || c.HTTP != "127.0.0.1:9" || c.LogLevel != "debug" {
		t.Fatalf("got %+v", c)
	}
	if !slices.Equal(c.Kafka, []string{"a:9092", "b:9092"}) {
		t.Fatalf("kafka = %v", c.Kafka)
	}
	if c.DataDir != "./tarn-data" || c.Shutdown != 30*time.Second {
		t.Fatalf("defaults lost: %+v", c)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tarn.yaml")
	os.WriteFile(file, []byte("partitons: 3\n"), 0o644)
	for _, tc := range []struct {
		args []string
		env  []string
		want []string
	}{
		{[]string{"--config", file}, nil, []string{`unknown setting "partitons"`}},
		{nil, []string{"TARN_PARTITIONS=three"}, []string{"TARN_PARTITIONS", "three"}},
		{[]string{"--partitions", "0", "--log-level", "loud", "--memory", "lots"}, nil,
			[]string{"partitions 0", `log-level "loud"`, `memory "lots"`}},
		{[]string{"--no-such-flag"}, nil, []string{"no-such-flag"}},
		{[]string{"--max-record-bytes", "128MiB"}, nil, []string{`max-record-bytes "128MiB"`, "1MiB to 64MiB"}},
		{nil, []string{"TARN_MAX_RECORD_BYTES=lots"}, []string{`max-record-bytes "lots"`}},
	} {
		_, _, err := loadConfig("serve", tc.args, tc.env)
		if err == nil {
			t.Fatalf("%v %v: no error", tc.args, tc.env)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q does not mention %q", tc.args, tc.env, err, w)
			}
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "64MB": 64e6, "4096": 4096} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1MiB", "MiB", "1.5GiB"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = nil error", bad)
		}
	}
}

func TestMaxRecordBytes(t *testing.T) {
	for _, tc := range []struct {
		args, env []string
		want      int32
	}{
		{nil, nil, 16 << 20},
		{[]string{"--max-record-bytes", "32MiB"}, nil, 32 << 20},
		{nil, []string{"TARN_MAX_RECORD_BYTES=2MiB"}, 2 << 20},
	} {
		c, _, err := loadConfig("serve", tc.args, tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := c.maxRecordBytes(); got != tc.want {
			t.Errorf("%v %v: max record bytes %d, want %d", tc.args, tc.env, got, tc.want)
		}
	}
}
