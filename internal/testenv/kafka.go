package testenv

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tarnhq/tarn/internal/localpg"
)

// KafkaProcess is a single-node Apache Kafka in KRaft mode (broker and controller in one JVM),
// run with `java -cp` from the jars that scripts/kafka-jars.sh fetched from Maven Central.
type KafkaProcess struct {
	Dir       string // holds server.properties, data/ and kafka.log
	Brokers   []string
	java      string
	classpath string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// LogPath is the broker log, whose tail a failing test prints.
func (k *KafkaProcess) LogPath() string { return filepath.Join(k.Dir, "kafka.log") }

// kafkaHeap is small so that several brokers fit on one machine (tests, benchmarks, CI).
const kafkaHeap = "512m"

// StartKafka formats a KRaft log folder under base and starts a broker on free ports, waiting
// until it answers metadata requests.
func StartKafka(ctx context.Context, base string) (*KafkaProcess, error) {
	libs, err := kafkaLibs(ctx)
	if err != nil {
		return nil, err
	}
	java, err := javaBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "kafka-")
	if err != nil {
		return nil, err
	}
	k := &KafkaProcess{Dir: dir}
	port, err := localpg.FreePort()
	if err != nil {
		return nil, err
	}
	controllerPort, err := localpg.FreePort()
	if err != nil {
		return nil, err
	}
	k.Brokers = []string{fmt.Sprintf("127.0.0.1:%d", port)}
	if err := k.writeConfig(port, controllerPort); err != nil {
		return nil, err
	}
	classpath := filepath.Join(libs, "*")
	format := exec.CommandContext(ctx, java, "-Xmx256m", "-cp", classpath,
		"-Dlog4j2.configurationFile="+filepath.Join(dir, "log4j2.properties"),
		"kafka.tools.StorageTool", "format", "--cluster-id="+newClusterID(), "-c", filepath.Join(dir, "server.properties"))
	if out, err := format.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testenv: kafka storage format: %w\n%s", err, out)
	}
	k.java, k.classpath = java, classpath
	if err := k.start(ctx); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}

// start runs the broker of k.Dir and waits until it answers.
func (k *KafkaProcess) start(ctx context.Context) error {
	logFile, err := os.OpenFile(k.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	k.cmd = exec.Command(k.java, "-Xms"+kafkaHeap, "-Xmx"+kafkaHeap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
		"-Djava.awt.headless=true", "-Dlog4j2.configurationFile="+filepath.Join(k.Dir, "log4j2.properties"),
		"-cp", k.classpath, "kafka.Kafka", filepath.Join(k.Dir, "server.properties"))
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	// Pdeathsig: a test binary killed hard must not leave a broker behind.
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("testenv: start kafka: %w", err)
	}
	exited := make(chan struct{})
	k.exited = exited
	cmd := k.cmd
	go func() { cmd.Wait(); logFile.Close(); close(exited) }()
	if err := k.waitReady(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, localpg.LogTail(k.LogPath(), 30))
	}
	return nil
}

// Kill stops the broker hard and keeps its data, for a test of an outage; Restart brings it
// back on the same ports.
func (k *KafkaProcess) Kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.exited
	}
}

// Restart starts a broker stopped by Kill again, with its data and ports.
func (k *KafkaProcess) Restart(ctx context.Context) error { return k.start(ctx) }

// KafkaSettings are the broker settings of a single-node KRaft broker for tarn, apart from
// addresses. docker-compose.yml sets the same (a test checks it).
var KafkaSettings = []KafkaSetting{
	{"process.roles", "broker,controller"},
	{"node.id", "1"},
	{"controller.listener.names", "CONTROLLER"},
	{"inter.broker.listener.name", "PLAINTEXT"},
	{"listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"},
	{"num.partitions", "1"},
	// tarn creates every topic it uses, with the partition count and policy it needs.
	{"auto.create.topics.enable", "false"},
	{"offsets.topic.replication.factor", "1"},
	{"offsets.topic.num.partitions", "10"},
	{"transaction.state.log.replication.factor", "1"},
	{"transaction.state.log.min.isr", "1"},
	{"transaction.state.log.num.partitions", "10"},
	{"share.coordinator.state.topic.replication.factor", "1"},
	{"share.coordinator.state.topic.min.isr", "1"},
	{"group.initial.rebalance.delay.ms", "0"},
	{"log.cleaner.backoff.ms", "1000"},
}

// KafkaSetting is one broker configuration property.
type KafkaSetting struct{ Name, Value string }

func (k *KafkaProcess) writeConfig(port, controllerPort int) error {
	props := fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%[2]d\n"+
		"listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d\n"+
		"advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d\n"+
		"log.dirs=%[3]s\n", port, controllerPort, filepath.Join(k.Dir, "data"))
	for _, s := range KafkaSettings {
		props += s.Name + "=" + s.Value + "\n"
	}
	log4j := `status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
`
	if err := os.WriteFile(filepath.Join(k.Dir, "server.properties"), []byte(props), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(k.Dir, "log4j2.properties"), []byte(log4j), 0o644)
}

// waitReady polls the broker until it lists itself in metadata, or the process dies.
func (k *KafkaProcess) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		brokers, err := adm.ListBrokers(attempt)
		cancelAttempt()
		if err == nil && len(brokers) > 0 {
			return nil
		}
		select {
		case <-k.exited:
			return errors.New("testenv: kafka exited during start")
		case <-ctx.Done():
			return fmt.Errorf("testenv: kafka not ready after %s: %v", limit, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop kills the broker (tests need no clean shutdown) and removes its folder.
func (k *KafkaProcess) Stop() error {
	k.Kill()
	return os.RemoveAll(k.Dir)
}

// kafkaLibs returns the folder of Kafka jars: TARN_KAFKA_LIBS, or what scripts/kafka-jars.sh
// prints (it downloads them once into a cache outside the repository).
func kafkaLibs(ctx context.Context) (string, error) {
	if d := os.Getenv("TARN_KAFKA_LIBS"); d != "" {
		return d, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "kafka-jars.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("testenv: scripts/kafka-jars.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func javaBinary() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		return filepath.Join(home, "bin", "java"), nil
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", errors.New("testenv: java not found; install OpenJDK 17+ or set TARN_TEST_KAFKA_BROKERS")
	}
	return p, nil
}

// newClusterID makes a KRaft cluster id: 16 random bytes in URL-safe base64 without padding,
// the form of Kafka's Uuid. It can start with "-", so it is passed as --cluster-id=ID.
func newClusterID() string {
	var b [16]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
