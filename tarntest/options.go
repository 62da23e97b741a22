package tarntest

import (
	"io"
	"maps"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// An Option changes how [Run] starts tarn. Options apply in order; a later one wins over an
// earlier one for the same setting.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is what the options set; newConfig gives the defaults each option documents.
type config struct {
	env         map[string]string
	cmd         []string
	entrypoint  []string
	configYAML  string
	hostNetwork bool
	networks    []string
	aliases     map[string][]string
	timeout     time.Duration
	logs        io.Writer
	extra       []testcontainers.ContainerCustomizer
}

func newConfig(opts []Option) *config {
	c := &config{env: map[string]string{}, cmd: []string{"serve"}, timeout: 2 * time.Minute, aliases: map[string][]string{}}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

// WithKafka sets the Kafka seed brokers (TARN_KAFKA). Default: none, and `tarn serve` refuses to
// start without them.
func WithKafka(brokers ...string) Option {
	return optionFunc(func(c *config) { c.env["TARN_KAFKA"] = strings.Join(brokers, ",") })
}

// WithPostgres sets the Postgres URL of CDC-fed views (TARN_POSTGRES). Default: none, which is
// enough only for a program whose views read no table.
func WithPostgres(url string) Option {
	return optionFunc(func(c *config) { c.env["TARN_POSTGRES"] = url })
}

// WithApp sets the application id, the prefix of tarn's topics and consumer groups (TARN_APP).
// Default: the image's, "tarn". Tests sharing one broker give each run its own.
func WithApp(id string) Option {
	return optionFunc(func(c *config) { c.env["TARN_APP"] = id })
}

// WithExactlyOnce runs every view with Kafka transactions (TARN_EXACTLY_ONCE). Default:
// at-least-once.
func WithExactlyOnce() Option {
	return optionFunc(func(c *config) { c.env["TARN_EXACTLY_ONCE"] = "true" })
}

// WithEnv adds environment variables, e.g. any TARN_ setting. Default: only those the other
// options set.
func WithEnv(env map[string]string) Option {
	return optionFunc(func(c *config) { maps.Copy(c.env, env) })
}

// WithConfig writes yaml as tarn's config file in the container and points TARN_CONFIG at it.
// Flags and TARN_ variables still win over its keys. Default: no file.
func WithConfig(yaml string) Option {
	return optionFunc(func(c *config) { c.configYAML = yaml })
}

// WithCmd sets the arguments of the image's entry point. Default: "serve". With
// [WithHostNetwork], an --http flag among them is the address [Run] waits on.
func WithCmd(args ...string) Option {
	return optionFunc(func(c *config) { c.cmd = args })
}

// WithEntrypoint sets the program that runs, for an image whose tarn program is not its entry
// point. Default: the image's (/tarn in tarn's image).
func WithEntrypoint(path ...string) Option {
	return optionFunc(func(c *config) { c.entrypoint = path })
}

// WithHostNetwork runs the container in the host's network (Linux engines only), so that Kafka
// and Postgres addresses on the host's 127.0.0.1 reach them; Kafka brokers that advertise
// 127.0.0.1 need it. tarn then listens on a free loopback port [Run] picks, unless --http is
// given with [WithCmd]. Default: the engine's bridge network, with port 8080 published.
func WithHostNetwork() Option {
	return optionFunc(func(c *config) { c.hostNetwork = true })
}

// WithNetwork attaches the container to a Docker network, under the given aliases, so that it
// reaches Kafka and Postgres containers on that network by their aliases. Default: none.
func WithNetwork(name string, aliases ...string) Option {
	return optionFunc(func(c *config) {
		c.networks = append(c.networks, name)
		c.aliases[name] = append(c.aliases[name], aliases...)
	})
}

// WithStartupTimeout bounds the wait for /readyz (restoring stores, creating topics). Default:
// 2 minutes.
func WithStartupTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithLogs copies the container's output (tarn's log) to w. Default: discarded, though [Run]'s
// errors carry its tail.
func WithLogs(w io.Writer) Option {
	return optionFunc(func(c *config) { c.logs = w })
}

// WithCustomizer passes a testcontainers-go customizer through, for anything the other options
// do not cover (mounts, resources, labels). Default: none.
func WithCustomizer(cz testcontainers.ContainerCustomizer) Option {
	return optionFunc(func(c *config) { c.extra = append(c.extra, cz) })
}
