package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/localpg"
)

// Environment variables that choose the images of the container path. scripts/images.sh builds
// tarn-test/postgres:15 and tarn-test/kafka:4.1.1 from this machine's own binaries (no registry
// needed) and prints assignments of both.
const (
	EnvPostgresImage = "TARN_TEST_POSTGRES_IMAGE" // default postgres:15
	EnvKafkaImage    = "TARN_TEST_KAFKA_IMAGE"    // default apache/kafka:4.1.1
	EnvNoContainers  = "TARN_TEST_NO_CONTAINERS"  // any value: never use an engine
	// EnvRequireContainers (any value) makes PostgresContainer and KafkaContainer fail rather
	// than skip when no engine answers: scripts/test-containers.sh sets it, so that a run meant
	// to exercise containers cannot pass without them.
	EnvRequireContainers = "TARN_TEST_REQUIRE_CONTAINERS"
)

// ErrNoEngine means no Docker engine answers, so the container path is not taken; use errors.Is.
var ErrNoEngine = errors.New("testenv: no Docker engine answers (scripts/test-containers.sh starts one and runs the container tests with it)")

// engineTimeout bounds the detection of an engine, so that its absence costs well under a second.
const engineTimeout = 500 * time.Millisecond

// loopback is where published ports are bound: test servers trust every client, so they must
// not be reachable from other machines.
var loopback = netip.MustParseAddr("127.0.0.1")

// PostgresContainer returns the URL of a new empty database on a Postgres running in a
// container (one per test process, started on first use, removed by Main), whatever
// TARN_TEST_POSTGRES_URL says. It skips tb, saying why, when no Docker engine answers.
func PostgresContainer(tb testing.TB) string {
	tb.Helper()
	adminURL, logPath, err := postgresContainerOnce(tb)
	if err != nil {
		tb.Fatalf("no Postgres container for this test: %v", err)
	}
	printTailOnFailure(tb, "postgres container", logPath)
	name := "t_" + strings.ToLower(sanitize(tb.Name())) + "_" + randomSuffix()
	u, err := localpg.FreshDatabase(context.Background(), adminURL, name)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// KafkaContainer returns the seed brokers of a Kafka broker running in a container (one per
// test process, started on first use, removed by Main), whatever TARN_TEST_KAFKA_BROKERS says.
// It skips tb, saying why, when no Docker engine answers.
func KafkaContainer(tb testing.TB) []string {
	tb.Helper()
	brokers, logPath, err := kafkaContainerOnce(tb)
	if err != nil {
		tb.Fatalf("no Kafka container for this test: %v", err)
	}
	printTailOnFailure(tb, "kafka container", logPath)
	return brokers
}

// ctrs holds the containers of this process, each started at most once; started.mu guards it
// (env.go's callers hold it already, the exported functions here take it).
var ctrs struct {
	engineOnce bool
	engineErr  error
	pg         containerOnce
	kafka      containerOnce
}

// containerOnce is the outcome of starting one container: its addresses, or why it failed, and
// the file its output goes to.
type containerOnce struct {
	done  bool
	addrs []string
	log   string
	err   error
}

func postgresContainerOnce(tb testing.TB) (string, string, error) {
	tb.Helper()
	started.mu.Lock()
	defer started.mu.Unlock()
	skipWithoutEngineLocked(tb)
	c, u, err := postgresContainer(context.Background())
	if c != nil {
		started.containers = append(started.containers, c)
	}
	return u, ctrs.pg.log, err
}

func kafkaContainerOnce(tb testing.TB) ([]string, string, error) {
	tb.Helper()
	started.mu.Lock()
	defer started.mu.Unlock()
	skipWithoutEngineLocked(tb)
	c, brokers, err := kafkaContainer(context.Background())
	if c != nil {
		started.containers = append(started.containers, c)
	}
	return brokers, ctrs.kafka.log, err
}

// skipWithoutEngineLocked skips tb, saying why, when no engine answers (or fails it, when
// EnvRequireContainers is set).
func skipWithoutEngineLocked(tb testing.TB) {
	tb.Helper()
	err := engineLocked(context.Background())
	switch {
	case err == nil:
	case os.Getenv(EnvRequireContainers) != "":
		tb.Fatalf("%v (%s is set)", err, EnvRequireContainers)
	default:
		tb.Skip(err)
	}
}

// dockerAnswers reports whether a Docker engine answers (see engineLocked). Callers hold
// started.mu.
func dockerAnswers(ctx context.Context) bool { return engineLocked(ctx) == nil }

// engineLocked reports, once per process, whether a Docker engine answers within
// engineTimeout: nil if so, else an error wrapping ErrNoEngine that says why.
func engineLocked(ctx context.Context) error {
	if !ctrs.engineOnce {
		ctrs.engineOnce = true
		ctrs.engineErr = probeEngine(ctx)
	}
	return ctrs.engineErr
}

// probeEngine asks the engine that testcontainers would use for its health, giving it
// engineTimeout. testcontainers' look-up of the engine ignores contexts (it waited ~55 s on a
// socket that accepts and never answers), so the question runs in a goroutine that is left to
// finish on its own when it takes too long.
func probeEngine(ctx context.Context) error {
	if os.Getenv(EnvNoContainers) != "" {
		return fmt.Errorf("%w: %s is set", ErrNoEngine, EnvNoContainers)
	}
	ctx, cancel := context.WithTimeout(ctx, engineTimeout)
	defer cancel()
	answer := make(chan error, 1)
	go func() { answer <- askEngine(ctx) }()
	select {
	case err := <-answer:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: no answer within %s", ErrNoEngine, engineTimeout)
	}
}

// askEngine is nil when the engine reports itself healthy. testcontainers panics in some
// set-ups without an engine; that counts as none.
func askEngine(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrNoEngine, r)
		}
	}()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return fmt.Errorf("%w: %v", ErrNoEngine, err)
	}
	return nil
}

// postgresContainer starts this process's Postgres container unless that was tried already,
// and returns its superuser URL. c is the container when this call started it, for the caller
// to register for removal by Main; nil otherwise. Callers hold started.mu.
func postgresContainer(ctx context.Context) (c *testcontainers.DockerContainer, url string, err error) {
	if !ctrs.pg.done {
		ctrs.pg.done = true
		var u string
		c, u, ctrs.pg.log, ctrs.pg.err = runPostgresContainer(ctx)
		ctrs.pg.addrs = []string{u}
	}
	if ctrs.pg.err != nil {
		return c, "", ctrs.pg.err
	}
	return c, ctrs.pg.addrs[0], nil
}

// runPostgresContainer runs Postgres with the same settings as the local cluster, its port
// published on loopback, and returns the superuser URL and the file its output goes to.
func runPostgresContainer(ctx context.Context) (*testcontainers.DockerContainer, string, string, error) {
	logPath, consumer, err := containerLogLocked("postgres")
	if err != nil {
		return nil, "", "", err
	}
	const port = "5432/tcp"
	c, err := testcontainers.Run(ctx, envOr(EnvPostgresImage, "postgres:15"),
		testcontainers.WithEnv(map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithCmd(postgresCommand()...),
		testcontainers.WithExposedPorts(port),
		testcontainers.WithHostConfigModifier(publish(port, "0")),
		testcontainers.WithLogConsumers(consumer),
		// The postgres image logs "ready to accept connections" twice (its set-up server, then
		// the real one) and tarn-test/postgres once: a query is the one sign both share.
		testcontainers.WithWaitStrategy(readyWhen{what: "postgres", limit: 60 * time.Second, probe: postgresAnswers}),
	)
	if err != nil {
		return c, "", logPath, fmt.Errorf("testenv: postgres container: %w\n%s", err, localpg.LogTail(logPath, 20))
	}
	u, err := postgresURL(ctx, c)
	return c, u, logPath, err
}

func postgresURL(ctx context.Context, target wait.StrategyTarget) (string, error) {
	host, err := target.Host(ctx)
	if err != nil {
		return "", err
	}
	port, err := target.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://postgres@%s:%s/postgres?sslmode=disable", host, port.Port()), nil
}

func postgresAnswers(ctx context.Context, target wait.StrategyTarget) error {
	u, err := postgresURL(ctx, target)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// kafkaContainer starts this process's Kafka container unless that was tried already, and
// returns its seed brokers. c is the container when this call started it, for the caller to
// register for removal by Main; nil otherwise. Callers hold started.mu.
func kafkaContainer(ctx context.Context) (c *testcontainers.DockerContainer, brokers []string, err error) {
	if !ctrs.kafka.done {
		ctrs.kafka.done = true
		c, ctrs.kafka.addrs, ctrs.kafka.log, ctrs.kafka.err = runKafkaContainer(ctx)
	}
	return c, ctrs.kafka.addrs, ctrs.kafka.err
}

// runKafkaContainer runs a single-node KRaft broker. The broker must advertise an address the
// host can reach, so it listens on the same free port inside and outside the container.
func runKafkaContainer(ctx context.Context) (*testcontainers.DockerContainer, []string, string, error) {
	port, err := localpg.FreePort()
	if err != nil {
		return nil, nil, "", err
	}
	logPath, consumer, err := containerLogLocked("kafka")
	if err != nil {
		return nil, nil, "", err
	}
	p := strconv.Itoa(port)
	brokers := []string{"127.0.0.1:" + p}
	c, err := testcontainers.Run(ctx, envOr(EnvKafkaImage, "apache/kafka:4.1.1"),
		testcontainers.WithEnv(kafkaContainerEnv(p)),
		testcontainers.WithExposedPorts(p+"/tcp"),
		testcontainers.WithHostConfigModifier(publish(p+"/tcp", p)),
		testcontainers.WithLogConsumers(consumer),
		// Readiness is what a client sees, a broker listed in metadata: log lines depend on the
		// image's logging set-up.
		testcontainers.WithWaitStrategy(readyWhen{what: "kafka", limit: 90 * time.Second,
			probe: func(ctx context.Context, _ wait.StrategyTarget) error { return kafkaAnswers(ctx, brokers) }}),
	)
	if err != nil {
		return c, nil, logPath, fmt.Errorf("testenv: kafka container: %w\n%s", err, localpg.LogTail(logPath, 20))
	}
	return c, brokers, logPath, nil
}

func kafkaAnswers(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	listed, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return err
	}
	if len(listed) == 0 {
		return errors.New("no broker in metadata yet")
	}
	return nil
}

// publish binds the container's port to hostPort ("0": any free one) on loopback.
func publish(port, hostPort string) func(*container.HostConfig) {
	return func(hc *container.HostConfig) {
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[network.MustParsePort(port)] = []network.PortBinding{{HostIP: loopback, HostPort: hostPort}}
	}
}

// readyWhen is a wait strategy that polls probe until it succeeds, and gives up early when the
// container stops.
type readyWhen struct {
	what  string
	limit time.Duration
	probe func(context.Context, wait.StrategyTarget) error
}

func (r readyWhen) WaitUntilReady(ctx context.Context, target wait.StrategyTarget) error {
	ctx, cancel := context.WithTimeout(ctx, r.limit)
	defer cancel()
	for {
		if st, err := target.State(ctx); err == nil && (st.Status == "exited" || st.Status == "dead") {
			return fmt.Errorf("testenv: %s container stopped during start (exit code %d, OOM killed %t)", r.what, st.ExitCode, st.OOMKilled)
		}
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		err := r.probe(attempt, target)
		cancelAttempt()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %s not ready after %s: %w", r.what, r.limit, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// logFile copies a container's output into a file, whose tail failing tests print as they do
// for local processes. It stays open for the life of the test process (the consumer may write
// until the container is removed); Main removes the folder.
type logFile struct{ f *os.File }

func (l logFile) Accept(entry testcontainers.Log) { l.f.Write(entry.Content) }

func containerLogLocked(what string) (string, logFile, error) {
	base, err := baseDirLocked()
	if err != nil {
		return "", logFile{}, err
	}
	path := filepath.Join(base, what+"-container.log")
	f, err := os.Create(path)
	if err != nil {
		return "", logFile{}, err
	}
	return path, logFile{f}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// postgresCommand is the container's command line with the same settings as a local cluster.
func postgresCommand() []string {
	cmd := []string{"postgres"}
	for _, s := range append(localpg.Settings[:len(localpg.Settings):len(localpg.Settings)], localpg.SpeedSettings...) {
		cmd = append(cmd, "-c", s.Name+"="+s.Value)
	}
	return cmd
}

// kafkaContainerEnv configures the apache/kafka image (and tarn-test/kafka, which reads the
// same variables), whose entry point turns KAFKA_FOO_BAR into foo.bar, with KafkaSettings and
// the listeners on port.
func kafkaContainerEnv(port string) map[string]string {
	env := map[string]string{
		"KAFKA_LISTENERS":                "PLAINTEXT://0.0.0.0:" + port + ",CONTROLLER://127.0.0.1:9093",
		"KAFKA_ADVERTISED_LISTENERS":     "PLAINTEXT://127.0.0.1:" + port,
		"KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093",
		"KAFKA_HEAP_OPTS":                "-Xms" + kafkaHeap + " -Xmx" + kafkaHeap,
	}
	for _, s := range KafkaSettings {
		env[KafkaEnvName(s.Name)] = s.Value
	}
	return env
}

// KafkaEnvName is the environment variable the apache/kafka image reads for a broker setting.
func KafkaEnvName(setting string) string {
	return "KAFKA_" + strings.ToUpper(strings.ReplaceAll(setting, ".", "_"))
}
