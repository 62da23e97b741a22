package tarn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tarnhq/tarn/views"
)

// Program is what a tarn binary runs: its views, the Postgres tables they read through CDC, and
// optionally what `tarn demo` loads and generates.
type Program struct {
	// Views are the views this program maintains and serves.
	Views []*views.View
	// CDCTables are the schema-qualified Postgres tables ("public.users") whose changes feed
	// the views; serve runs a CDC source for them when --postgres is given.
	CDCTables []string
	// Demo, when set, makes `tarn demo` available.
	Demo *Demo
}

// Main runs the command line of p and exits: `tarn <command> [settings]`.
func Main(p Program) {
	os.Exit(Run(context.Background(), p, os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// command is one subcommand of the command line.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, p Program, inv invocation) error
}

// invocation is what a command runs with.
type invocation struct {
	cfg    Config
	args   []string // positional arguments after the settings
	stdout io.Writer
	log    *slog.Logger
}

var commands = []command{
	{"serve", "", "maintain and serve the views (CDC, views runtime, HTTP API)", runServe},
	{"demo", "", "run everything on this machine with no setup: in-process Kafka, throwaway Postgres, demo data", runDemo},
	{"rebuild", "<view>", "start a new version of a view that reprocesses its inputs (asks the instance at --http)", runRebuild},
	{"migrate", "", "apply tarn's SQL migrations to --postgres", runMigrate},
	{"status", "", "print each view's state, lag and progress (asks the instance at --http)", runStatus},
	{"reset", "", "delete this instance's local stores (--data-dir); they restore from their changelogs", runReset},
	{"version", "", "print the version", runVersion},
}

// Run is Main without the exit: it returns the process exit code.
func Run(ctx context.Context, p Program, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "tarn: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	cfg, fs, err := loadConfig(cmd.name, args[1:], environ)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(stderr, cmd, fs)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tarn %s: %v\n\nsee: tarn %s --help\n", cmd.name, indent(err.Error()), cmd.name)
		return 2
	}
	inv := invocation{cfg: cfg, args: fs.Args(), stdout: stdout, log: newLogger(stderr, cfg.LogLevel)}
	ctx, stop := signalContext(ctx, inv.log)
	defer stop()
	if err := cmd.run(ctx, p, inv); err != nil {
		fmt.Fprintf(stderr, "tarn %s: %v\n", cmd.name, indent(err.Error()))
		return 1
	}
	return 0
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: tarn <command> [settings]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nEvery setting is a flag (--kafka), an environment variable (TARN_KAFKA) or a key of the")
	fmt.Fprintln(w, "YAML file named by --config (kafka: ...); see tarn <command> --help.")
}

func commandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: tarn %s [settings] %s\n\n%s\n\nsettings (a flag beats its environment variable, which beats the config file):\n",
		c.name, c.args, c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// signalContext is cancelled by the first SIGINT or SIGTERM, so that commands stop gracefully
// (finish the batch, commit, flush, close); a second signal exits at once.
func signalContext(parent context.Context, log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			log.Info("tarn: stopping; send the signal again to exit at once", "signal", s.String())
			cancel()
		case <-ctx.Done():
			return
		}
		s := <-ch
		log.Error("tarn: second signal, exiting now", "signal", s.String())
		os.Exit(130)
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level)) // Validate checked it
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// indent makes a joined multi-line error readable under its heading.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
