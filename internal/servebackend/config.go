package servebackend

import (
	"errors"
	"log/slog"

	"github.com/tarnhq/tarn/views"
)

// Config configures a [Backend]. [New] copies it and fills the defaults.
type Config struct {
	// Runtime is the views runtime whose queryable views are served. Required.
	Runtime *views.Runtime
	// CDCSlot is the replication slot of the program's CDC source, whose position topic
	// turns min_lsn into waits; "" (the default) when the program replicates no tables: then
	// min_lsn has nothing to wait for and answers carry no LSN.
	CDCSlot string
	// Brokers and App locate the CDC source's position topic. Required with CDCSlot.
	Brokers []string
	App     string
	// CDCTopics are the table topics the CDC source writes: a view reading one of them is
	// failing while CDCProblem says why the source does not run. Default none.
	CDCTopics []string
	// CDCProblem says why the CDC source does not run on this instance although it should,
	// "" when it streams, runs elsewhere or is not configured; /readyz and /v1/views show
	// it. Default: never a problem.
	CDCProblem func() string
	// Logger logs what answers do not show. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.CDCProblem == nil {
		c.CDCProblem = func() string { return "" }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Brokers = append([]string(nil), c.Brokers...)
	c.CDCTopics = append([]string(nil), c.CDCTopics...)
	return c
}

// Validate returns every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Runtime == nil {
		errs = append(errs, errors.New("servebackend: Config.Runtime is required"))
	}
	if c.CDCSlot != "" && len(c.Brokers) == 0 {
		errs = append(errs, errors.New("servebackend: Config.Brokers is required with CDCSlot"))
	}
	if c.CDCSlot != "" && c.App == "" {
		errs = append(errs, errors.New("servebackend: Config.App is required with CDCSlot"))
	}
	return errors.Join(errs...)
}
