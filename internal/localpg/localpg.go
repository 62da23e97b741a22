// Package localpg runs throwaway Postgres clusters from the machine's own server binaries: the
// test harness uses one per test run and `tarn demo` one per demo.
//
// # Invariants
//
//   - A [Cluster] runs with wal_level=logical ([Settings]); Postgres refuses to run as root, so
//     when started by root the cluster belongs to the unprivileged "postgres" user.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a throwaway Postgres cluster run from the machine's server binaries.
type Cluster struct {
	Dir   string // holds data/ and postgres.log
	Port  int
	URL   string // superuser URL of the postgres database
	bin   string
	runAs string // unprivileged user the server runs as when we are root, else ""
}

// LogPath is the server log, whose tail a failing test prints.
func (p *Cluster) LogPath() string { return filepath.Join(p.Dir, "postgres.log") }

// binDir finds the newest installed Postgres server binaries (Debian puts them under
// /usr/lib/postgresql/<major>/bin), or TARN_POSTGRES_BIN when set.
func binDir() (string, error) {
	if d := os.Getenv("TARN_POSTGRES_BIN"); d != "" {
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return majorOf(matches[i]) > majorOf(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("localpg: no Postgres server binaries (initdb) found; run scripts/deps.sh or apt-get install postgresql, or name a running server")
}

func majorOf(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Start initialises and starts a cluster in a new folder under base with
// wal_level=logical on a free port. Postgres refuses to run as root, so when we are root the
// cluster belongs to the "postgres" user and every folder above it is made traversable.
func Start(ctx context.Context, base string) (*Cluster, error) {
	return StartWith(ctx, base, Options{})
}

// Options are what tests of tarn's refusals change in a cluster.
type Options struct {
	// Settings are added after [Settings] and win over them (e.g. wal_level=replica).
	Settings []Setting
	// Password, when set, is the superuser's password and TCP connections must give it
	// (scram-sha-256); by default they are trusted.
	Password string
}

// StartWith is Start with opts.
func StartWith(ctx context.Context, base string, opts Options) (*Cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "postgres-")
	if err != nil {
		return nil, err
	}
	p := &Cluster{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		p.runAs = "postgres"
		if err := p.handOver(); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	auth := []string{"-A", "trust"}
	if opts.Password != "" {
		pw := filepath.Join(dir, "pwfile")
		if err := os.WriteFile(pw, []byte(opts.Password+"\n"), 0o600); err != nil {
			return nil, err
		}
		if err := p.chownToRunAs(pw); err != nil {
			return nil, err
		}
		auth = []string{"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + pw}
	}
	args := append([]string{"-D", data, "-U", "postgres", "-E", "UTF8", "--no-sync"}, auth...)
	if out, err := p.command(ctx, "initdb", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("localpg: initdb: %w\n%s", err, out)
	}
	for attempt := 0; ; attempt++ {
		if p.Port, err = FreePort(); err != nil {
			return nil, err
		}
		if err = p.writeConfig(data, opts.Settings); err != nil {
			return nil, err
		}
		out, err := p.command(ctx, "pg_ctl", "-D", data, "-l", p.LogPath(), "-w", "-t", "60", "start").CombinedOutput()
		if err == nil {
			break
		}
		if attempt == 2 {
			return nil, fmt.Errorf("localpg: pg_ctl start: %w\n%s\n%s", err, out, LogTail(p.LogPath(), 20))
		}
	}
	userinfo := url.User("postgres")
	if opts.Password != "" {
		userinfo = url.UserPassword("postgres", opts.Password)
	}
	p.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", userinfo, p.Port)
	return p, nil
}

// handOver gives the cluster folder to the unprivileged user and makes the folders above it
// traversable (t.TempDir and mktemp make 0700 folders, and initdb then fails).
func (p *Cluster) handOver() error {
	u, err := user.Lookup(p.runAs)
	if err != nil {
		return fmt.Errorf("localpg: running as root needs a %q user to own the Postgres cluster: %w", p.runAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(p.Dir, uid, gid); err != nil {
		return err
	}
	for d := p.Dir; d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, st.Mode().Perm()|0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// Settings are the server settings tarn needs for logical replication.
// docker-compose.yml sets the same (a test checks it).
//
// Every tarn app makes its own slot, and the integration tests run many apps on one cluster
// without dropping them, hence room for a hundred.
var Settings = []Setting{
	{"wal_level", "logical"},
	{"max_wal_senders", "100"},
	{"max_replication_slots", "100"},
	{"max_connections", "200"},
}

// SpeedSettings trade durability for speed; right for throwaway test clusters, never for
// production. synchronous_commit stays on: with it off a commit reaches the WAL senders (and
// so CDC) only at the WAL writer's next flush, up to wal_writer_delay (200ms) later, which
// would be measured as tarn's latency; with fsync off the flush costs nothing.
var SpeedSettings = []Setting{
	{"fsync", "off"},
	{"full_page_writes", "off"},
}

// Setting is one server configuration parameter.
type Setting struct{ Name, Value string }

func (p *Cluster) writeConfig(data string, extra []Setting) error {
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n", p.Port, p.Dir)
	all := append(append(Settings[:len(Settings):len(Settings)], SpeedSettings...), extra...)
	for _, s := range all {
		conf += s.Name + " = " + s.Value + "\n"
	}
	path := filepath.Join(data, "postgresql.auto.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return err
	}
	return p.chownToRunAs(path)
}

func (p *Cluster) chownToRunAs(path string) error {
	if p.runAs == "" {
		return nil
	}
	u, err := user.Lookup(p.runAs)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(path, uid, gid)
}

func (p *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := filepath.Join(p.bin, name)
	var cmd *exec.Cmd
	if p.runAs != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", p.runAs, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = p.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// Stop shuts the cluster down at once (tests need no checkpoint) and removes its folder.
func (p *Cluster) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := p.command(ctx, "pg_ctl", "-D", filepath.Join(p.Dir, "data"), "-m", "immediate", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("localpg: pg_ctl stop: %w\n%s", err, out)
	}
	return os.RemoveAll(p.Dir)
}

// Pause stops the server (fast shutdown) and keeps its data, so that Resume starts it again
// on the same port: tests of clients that must ride out a Postgres restart.
func (p *Cluster) Pause(ctx context.Context) error {
	out, err := p.command(ctx, "pg_ctl", "-D", filepath.Join(p.Dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("localpg: pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// Resume starts a paused server.
func (p *Cluster) Resume(ctx context.Context) error {
	out, err := p.command(ctx, "pg_ctl", "-D", filepath.Join(p.Dir, "data"), "-l", p.LogPath(), "-w", "-t", "60", "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("localpg: pg_ctl start: %w\n%s\n%s", err, out, LogTail(p.LogPath(), 20))
	}
	return nil
}

// FreshDatabase creates a new empty database on the server at adminURL and returns its URL, so
// that tests sharing one server cannot see each other's tables, publications or slots.
func FreshDatabase(ctx context.Context, adminURL, name string) (string, error) {
	cfg, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", fmt.Errorf("localpg: bad Postgres URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("localpg: connect to Postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("localpg: create database %s: %w", name, err)
	}
	return WithDatabase(adminURL, name)
}

// WithDatabase returns the postgres:// URL rawURL pointing at database name instead.
func WithDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("localpg: want a postgres:// URL, got %q", rawURL)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// FreePort asks the kernel for a free loopback port. Another process may take it before a
// server binds it; Start retries, and so should other callers (the test harness uses it for
// Kafka too).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LogTail returns the last n lines of a server log, for error messages.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
