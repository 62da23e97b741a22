package testenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/tarnhq/tarn/internal/localpg"
)

// Images used when a Docker engine answers; override them to use images built locally.
var (
	postgresImage = envOr("TARN_TEST_POSTGRES_IMAGE", "postgres:15")
	kafkaImage    = envOr("TARN_TEST_KAFKA_IMAGE", "apache/kafka:4.1.1")
)

// dockerAnswers reports whether a Docker engine answers within half a second. testcontainers
// panics in some set-ups without an engine; that counts as no.
func dockerAnswers(ctx context.Context) (ok bool) {
	if os.Getenv("TARN_TEST_NO_CONTAINERS") != "" {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return false
	}
	defer provider.Close()
	return provider.Health(ctx) == nil
}

// postgresContainer runs Postgres with the same settings as the local cluster.
func postgresContainer(ctx context.Context) (*testcontainers.DockerContainer, string, error) {
	c, err := testcontainers.Run(ctx, postgresImage,
		testcontainers.WithEnv(map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithCmd(postgresCommand()...),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(60*time.Second)),
	)
	if err != nil {
		return c, "", err
	}
	host, err := c.Host(ctx)
	if err != nil {
		return c, "", err
	}
	port, err := c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return c, "", err
	}
	return c, fmt.Sprintf("postgres://postgres@%s:%s/postgres?sslmode=disable", host, port.Port()), nil
}

// kafkaContainer runs a single-node KRaft broker. The broker must advertise an address the host
// can reach, so it listens on the same free port inside and outside the container.
func kafkaContainer(ctx context.Context) (*testcontainers.DockerContainer, []string, error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	p := strconv.Itoa(port)
	c, err := testcontainers.Run(ctx, kafkaImage,
		testcontainers.WithEnv(kafkaContainerEnv(p)),
		testcontainers.WithExposedPorts(p+":"+p+"/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("Kafka Server started").WithStartupTimeout(90*time.Second)),
	)
	if err != nil {
		return c, nil, err
	}
	return c, []string{"127.0.0.1:" + p}, nil
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

// kafkaContainerEnv configures the apache/kafka image, whose entry point turns KAFKA_FOO_BAR
// into foo.bar, with KafkaSettings and the listeners on port.
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
