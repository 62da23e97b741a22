package tarn

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tarnhq/tarn/internal/topic"
)

// Config is every setting of a tarn process. Each can be given as a flag (--kafka), an
// environment variable (TARN_KAFKA) or a key of the YAML config file named by --config
// (kafka: ...); a flag beats the environment, which beats the file, which beats the default.
type Config struct {
	App            string        // application id: prefix of topics and consumer groups (default "tarn")
	Kafka          []string      // seed brokers; empty in `tarn demo` means an in-process broker
	Postgres       string        // Postgres URL for CDC-fed views and lookups
	DataDir        string        // local stores (default "./tarn-data")
	HTTP           string        // listen address of the HTTP API (default "127.0.0.1:8080")
	Advertise      string        // base URL other instances use to reach this one (default from HTTP)
	ExactlyOnce    bool          // Kafka transactions for every effect (default off: at-least-once)
	Partitions     int           // partitions of topics tarn creates (default 3)
	Memory         string        // memory for stores, e.g. "512MiB" (default a quarter of the machine's)
	MaxRecordBytes string        // largest record tarn writes, 1MiB to 64MiB (default "16MiB"); larger ones are dead-lettered
	TokenFile      string        // file holding the bearer token the HTTP API requires (default none)
	LogLevel       string        // debug, info, warn or error (default info)
	Shutdown       time.Duration // how long a graceful stop may take (default 30s)
	InstanceID     string        // stable id of this instance in the app's groups (default: kept in the data folder)
	Session        time.Duration // how long the group waits for a silent instance (default 10s)
}

// setting describes one Config field for flags, environment and file alike.
type setting struct {
	name  string
	usage string
	bind  func(fs *flag.FlagSet, c *Config)
}

var settings = []setting{
	{"app", "application id: prefix of topics and consumer groups", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.App, "app", "tarn", "")
	}},
	{"kafka", "comma-separated Kafka seed brokers (demo: empty starts an in-process broker)", func(fs *flag.FlagSet, c *Config) {
		fs.Func("kafka", "", func(s string) error { c.Kafka = splitList(s); return nil })
	}},
	{"postgres", "Postgres URL for CDC-fed views (demo: empty starts a throwaway local cluster)", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.Postgres, "postgres", "", "")
	}},
	{"data-dir", "folder of the local stores", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.DataDir, "data-dir", "./tarn-data", "")
	}},
	{"http", "listen address of the HTTP API", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.HTTP, "http", "127.0.0.1:8080", "")
	}},
	{"advertise", "base URL other instances use to reach this one (default http://<http>)", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.Advertise, "advertise", "", "")
	}},
	{"exactly-once", "use Kafka transactions so every view equals one processing of each input", func(fs *flag.FlagSet, c *Config) {
		fs.BoolVar(&c.ExactlyOnce, "exactly-once", false, "")
	}},
	{"partitions", "partitions of the topics tarn creates", func(fs *flag.FlagSet, c *Config) {
		fs.IntVar(&c.Partitions, "partitions", 3, "")
	}},
	{"memory", "memory for local stores, e.g. 512MiB (default a quarter of the machine's)", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.Memory, "memory", "", "")
	}},
	{"max-record-bytes", "largest record (row, view value) tarn writes to a topic, 1MiB to 64MiB; larger ones go to the dead-letter topic", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.MaxRecordBytes, "max-record-bytes", "16MiB", "")
	}},
	{"token-file", "file holding the bearer token the HTTP API requires", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.TokenFile, "token-file", "", "")
	}},
	{"log-level", "debug, info, warn or error", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.LogLevel, "log-level", "info", "")
	}},
	{"shutdown-timeout", "how long a graceful stop may take", func(fs *flag.FlagSet, c *Config) {
		fs.DurationVar(&c.Shutdown, "shutdown-timeout", 30*time.Second, "")
	}},
	{"instance-id", "stable id of this instance in the app's consumer groups, unique per instance (default: generated once and kept in <data-dir>/instance-id)", func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.InstanceID, "instance-id", "", "")
	}},
	{"session-timeout", "how long the others wait for a silent instance before taking its partitions (at least the broker's group.min.session.timeout.ms)", func(fs *flag.FlagSet, c *Config) {
		fs.DurationVar(&c.Session, "session-timeout", 10*time.Second, "")
	}},
}

// envName is the environment variable of a setting: TARN_ and the name in capitals.
func envName(name string) string {
	return "TARN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// newFlagSet binds every setting of c to a flag set whose usage documents flags, environment
// variables and the config file together.
func newFlagSet(command string, c *Config) *flag.FlagSet {
	fs := flag.NewFlagSet("tarn "+command, flag.ContinueOnError)
	for _, s := range settings {
		s.bind(fs, c)
		f := fs.Lookup(s.name)
		f.Usage = fmt.Sprintf("%s (env %s, file key %q)", s.usage, envName(s.name), s.name)
	}
	fs.String("config", "", "YAML file of settings, keys as the flag names (env TARN_CONFIG)")
	return fs
}

// loadConfig parses args into a Config: flags first, then for every setting not given as a
// flag, the environment, then the config file. Every unknown or invalid setting is reported at
// once, each with its name and source.
func loadConfig(command string, args []string, environ []string) (Config, *flag.FlagSet, error) {
	var c Config
	fs := newFlagSet(command, &c)
	fs.SetOutput(new(strings.Builder)) // usage is printed by the caller
	if err := fs.Parse(args); err != nil {
		return c, fs, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	env := envMap(environ)
	var errs []error
	for _, s := range settings {
		if v, ok := env[envName(s.name)]; ok && !given[s.name] {
			if err := fs.Set(s.name, v); err != nil {
				errs = append(errs, fmt.Errorf("environment %s=%q: %w", envName(s.name), v, err))
			}
			given[s.name] = true
		}
	}
	path := fs.Lookup("config").Value.String()
	if path == "" {
		path = env["TARN_CONFIG"]
	}
	if path != "" {
		errs = append(errs, applyFile(fs, path, given)...)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fs, err
	}
	return c, fs, c.Validate()
}

// applyFile sets, from a YAML file, the settings not given as flags or environment variables.
func applyFile(fs *flag.FlagSet, path string, given map[string]bool) []error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return []error{fmt.Errorf("config file: %w", err)}
	}
	var file map[string]yaml.Node
	if err := yaml.Unmarshal(raw, &file); err != nil {
		return []error{fmt.Errorf("config file %s: not a YAML mapping of settings: %w", path, err)}
	}
	keys := make([]string, 0, len(file))
	for k := range file {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		node := file[k]
		if fs.Lookup(k) == nil || k == "config" {
			errs = append(errs, fmt.Errorf("config file %s: unknown setting %q (see tarn --help)", path, k))
			continue
		}
		if given[k] {
			continue
		}
		v := node.Value
		if node.Kind == yaml.SequenceNode {
			var items []string
			if err := node.Decode(&items); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: %s: %w", path, k, err))
				continue
			}
			v = strings.Join(items, ",")
		}
		if err := fs.Set(k, v); err != nil {
			errs = append(errs, fmt.Errorf("config file %s: %s=%q: %w", path, k, v, err))
		}
	}
	return errs
}

// Validate reports every invalid setting at once.
func (c *Config) Validate() error {
	var errs []error
	if c.App == "" || strings.ContainsAny(c.App, ". /") {
		errs = append(errs, fmt.Errorf("app %q: use letters, digits, '_' and '-' only", c.App))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions %d: must be at least 1", c.Partitions))
	}
	if c.Memory != "" {
		if _, err := parseBytes(c.Memory); err != nil {
			errs = append(errs, fmt.Errorf("memory %q: %w", c.Memory, err))
		}
	}
	if _, err := c.maxRecordBytes(); err != nil {
		errs = append(errs, fmt.Errorf("max-record-bytes %q: %w", c.MaxRecordBytes, err))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	if c.InstanceID != "" && !validInstanceID(c.InstanceID) {
		errs = append(errs, fmt.Errorf("instance-id %q: use 1 to 64 letters, digits, '_' and '-'", c.InstanceID))
	}
	if c.Session <= 0 {
		errs = append(errs, fmt.Errorf("session-timeout %s: must be positive", c.Session))
	}
	if c.Shutdown <= 0 {
		errs = append(errs, fmt.Errorf("shutdown-timeout %s: must be positive", c.Shutdown))
	}
	return errors.Join(errs...)
}

// maxRecordBytes is MaxRecordBytes in bytes; "" is the default.
func (c *Config) maxRecordBytes() (int32, error) {
	if c.MaxRecordBytes == "" {
		return topic.DefaultMaxRecordBytes, nil
	}
	n, err := parseBytes(c.MaxRecordBytes)
	if err != nil {
		return 0, err
	}
	if n < topic.MinRecordBytes || n > topic.MaxRecordBytes {
		return 0, errors.New("want a size from 1MiB to 64MiB")
	}
	return int32(n), nil
}

// parseBytes reads sizes such as 512MiB, 2GiB, 64MB or a plain number of bytes.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive size such as 512MiB or 2GiB")
	}
	return n * mult, nil
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
