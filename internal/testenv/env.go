package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/testcontainers/testcontainers-go"

	"github.com/tarnhq/tarn/internal/localpg"
)

// Environment variables through which a running Postgres and Kafka are handed to tests.
const (
	EnvPostgresURL  = "TARN_TEST_POSTGRES_URL"  // superuser URL; each test gets its own database
	EnvKafkaBrokers = "TARN_TEST_KAFKA_BROKERS" // comma-separated seed brokers
	EnvPostgresLog  = "TARN_TEST_POSTGRES_LOG"  // server log whose tail failing tests print
	EnvKafkaLog     = "TARN_TEST_KAFKA_LOG"     // broker log whose tail failing tests print
)

// started holds what this process started, so Main can stop it; each part starts once.
var started struct {
	mu         sync.Mutex
	base       string
	pgURL      string
	pgLog      string
	pgErr      error
	pgOnce     bool
	postgres   *localpg.Cluster
	brokers    []string
	kafkaLog   string
	kafkaErr   error
	kafkaOnce  bool
	kafka      *KafkaProcess
	containers []*testcontainers.DockerContainer
}

// Main runs the package's tests and then stops whatever Postgres or Kafka they started.
func Main(m *testing.M) {
	code := m.Run()
	if err := StopAll(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// StopAll stops every process and container this process started.
func StopAll() error {
	started.mu.Lock()
	defer started.mu.Unlock()
	var errs []error
	if started.kafka != nil {
		errs = append(errs, started.kafka.Stop())
	}
	if started.postgres != nil {
		errs = append(errs, started.postgres.Stop())
	}
	for _, c := range started.containers {
		errs = append(errs, testcontainers.TerminateContainer(c))
	}
	if started.base != "" {
		errs = append(errs, os.RemoveAll(started.base))
	}
	return errors.Join(errs...)
}

// Kafka returns the seed brokers of a real Kafka broker shared by the tests of this process.
func Kafka(tb testing.TB) []string {
	tb.Helper()
	brokers, logPath, err := kafkaOnce()
	if err != nil {
		tb.Fatalf("no Kafka for this test: %v", err)
	}
	printTailOnFailure(tb, "kafka", logPath)
	return brokers
}

// Postgres returns the URL of a new empty database, on a real Postgres with wal_level=logical
// shared by the tests of this process, as a superuser.
func Postgres(tb testing.TB) string {
	tb.Helper()
	adminURL, logPath, err := postgresOnce()
	if err != nil {
		tb.Fatalf("no Postgres for this test: %v", err)
	}
	printTailOnFailure(tb, "postgres", logPath)
	name := "t_" + strings.ToLower(sanitize(tb.Name())) + "_" + randomSuffix()
	u, err := localpg.FreshDatabase(context.Background(), adminURL, name)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// PostgresAdminURL returns the superuser URL of the shared server's postgres database, for
// helpers that manage databases themselves.
func PostgresAdminURL(tb testing.TB) string {
	tb.Helper()
	u, logPath, err := postgresOnce()
	if err != nil {
		tb.Fatalf("no Postgres for this test: %v", err)
	}
	printTailOnFailure(tb, "postgres", logPath)
	return u
}

func kafkaOnce() ([]string, string, error) {
	if v := os.Getenv(EnvKafkaBrokers); v != "" {
		return strings.Split(v, ","), os.Getenv(EnvKafkaLog), nil
	}
	started.mu.Lock()
	defer started.mu.Unlock()
	if !started.kafkaOnce {
		started.kafkaOnce = true
		started.brokers, started.kafkaLog, started.kafkaErr = startKafkaLocked(context.Background())
	}
	return started.brokers, started.kafkaLog, started.kafkaErr
}

func postgresOnce() (string, string, error) {
	if v := os.Getenv(EnvPostgresURL); v != "" {
		return v, os.Getenv(EnvPostgresLog), nil
	}
	started.mu.Lock()
	defer started.mu.Unlock()
	if !started.pgOnce {
		started.pgOnce = true
		started.pgURL, started.pgLog, started.pgErr = startPostgresLocked(context.Background())
	}
	return started.pgURL, started.pgLog, started.pgErr
}

func startKafkaLocked(ctx context.Context) ([]string, string, error) {
	if dockerAnswers(ctx) {
		c, brokers, err := kafkaContainer(ctx)
		if c != nil {
			started.containers = append(started.containers, c)
		}
		if err == nil {
			return brokers, ctrs.kafka.log, nil
		}
		fmt.Fprintf(os.Stderr, "testenv: Kafka container failed (%v); using a local broker\n", err)
	}
	base, err := baseDirLocked()
	if err != nil {
		return nil, "", err
	}
	k, err := StartKafka(ctx, base)
	if err != nil {
		return nil, "", err
	}
	started.kafka = k
	return k.Brokers, k.LogPath(), nil
}

func startPostgresLocked(ctx context.Context) (string, string, error) {
	if dockerAnswers(ctx) {
		c, u, err := postgresContainer(ctx)
		if c != nil {
			started.containers = append(started.containers, c)
		}
		if err == nil {
			return u, ctrs.pg.log, nil
		}
		fmt.Fprintf(os.Stderr, "testenv: Postgres container failed (%v); using a local cluster\n", err)
	}
	base, err := baseDirLocked()
	if err != nil {
		return "", "", err
	}
	p, err := localpg.Start(ctx, base)
	if err != nil {
		return "", "", err
	}
	started.postgres = p
	return p.URL, p.LogPath(), nil
}

func baseDirLocked() (string, error) {
	if started.base == "" {
		d, err := os.MkdirTemp("", "tarn-testenv-")
		if err != nil {
			return "", err
		}
		started.base = d
	}
	return started.base, nil
}

func printTailOnFailure(tb testing.TB, what, logPath string) {
	if logPath == "" {
		return
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("last lines of the %s log (%s):\n%s", what, logPath, localpg.LogTail(logPath, 40))
		}
	})
}

// moduleRoot finds the folder holding go.mod, from the working directory upwards (go test runs
// a package's tests in its own folder).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testenv: go.mod not found above the working directory")
		}
		dir = parent
	}
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

func randomSuffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
