package integration

import (
	"os"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tarnhq/tarn/internal/localpg"
	"github.com/tarnhq/tarn/internal/testenv"
)

// composeFile is the part of docker-compose.yml this test reads.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

// TestComposeMatchesHarness parses docker-compose.yml (no Docker engine runs here) and checks
// that its Postgres and Kafka settings are those the test harness runs with, so what users
// start with Docker is what the tests proved.
func TestComposeMatchesHarness(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	for _, name := range []string{"postgres", "kafka", "tarn"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
	}
	pg := c.Services["postgres"].Command
	for _, s := range localpg.Settings {
		if !slices.Contains(pg, s.Name+"="+s.Value) {
			t.Errorf("postgres service lacks -c %s=%s (the harness sets it)", s.Name, s.Value)
		}
	}
	env := c.Services["kafka"].Environment
	for _, s := range testenv.KafkaSettings {
		if got := env[testenv.KafkaEnvName(s.Name)]; got != s.Value {
			t.Errorf("kafka service has %s=%q, the harness sets %s=%s", testenv.KafkaEnvName(s.Name), got, s.Name, s.Value)
		}
	}
	if c.Services["tarn"].Build == nil {
		t.Error("tarn service must build the repository's Dockerfile")
	}
}
