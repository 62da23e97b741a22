package cdc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarnhq/tarn/internal/topic"
)

// cluster is a throwaway Postgres cluster with settings the shared test server cannot have
// (wal_level, password authentication, a small max_slot_wal_keep_size).
type cluster struct {
	dir, bin, runAs string
	port            int
}

const clusterPassword = "s3cret"

func startCluster(t *testing.T, settings map[string]string) *cluster {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		t.Fatal("no Postgres server binaries under /usr/lib/postgresql")
	}
	c := &cluster{bin: filepath.Dir(matches[len(matches)-1]), dir: t.TempDir()}
	if os.Geteuid() == 0 {
		c.runAs = "postgres"
		c.handOver(t)
	}
	pw := filepath.Join(c.dir, "pw")
	c.write(t, pw, clusterPassword)
	data := filepath.Join(c.dir, "data")
	c.run(t, "initdb", "-D", data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pw, "-E", "UTF8", "--no-sync")
	c.port = freePort(t)
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\n", c.port, c.dir)
	for k, v := range settings {
		conf += k + " = " + v + "\n"
	}
	c.write(t, filepath.Join(data, "postgresql.auto.conf"), conf)
	c.run(t, "pg_ctl", "-D", data, "-l", filepath.Join(c.dir, "log"), "-w", "start")
	t.Cleanup(func() {
		cmd := c.command("pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	return c
}

func (c *cluster) url(password string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, c.port)
}

func (c *cluster) handOver(t *testing.T) {
	u, err := user.Lookup(c.runAs)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(c.dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	for d := c.dir; d != "/"; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *cluster) write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if c.runAs != "" {
		u, _ := user.Lookup(c.runAs)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

func (c *cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if c.runAs != "" {
		return exec.Command("runuser", append([]string{"-u", c.runAs, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *cluster) run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestConnectErrors: a wrong password and wal_level=replica each give their error.
func TestConnectErrors(t *testing.T) {
	c := startCluster(t, map[string]string{"wal_level": "replica"})
	e := &env{brokers: nil, app: uniqueName(t)}
	cfg := e.config(t, "public.t")
	cfg.Brokers = []string{"127.0.0.1:1"} // never reached: Postgres is checked first

	cfg.PostgresURL = c.url("wrong")
	if err := runErr(t, cfg); !errors.Is(err, ErrAuth) || !IsPermanent(err) {
		t.Errorf("wrong password: Run = %v, want ErrAuth", err)
	} else {
		t.Logf("wrong password: %v", err)
	}
	cfg.PostgresURL = c.url(clusterPassword)
	cfg.Registerer = nil
	if err := runErr(t, cfg); !errors.Is(err, ErrWalLevel) || !IsPermanent(err) || !strings.Contains(err.Error(), `"replica"`) {
		t.Errorf("wal_level=replica: Run = %v, want ErrWalLevel naming the level", err)
	} else {
		t.Logf("wal_level=replica: %v", err)
	}
}

// TestInvalidatedSlot: once the server drops WAL the slot needs (max_slot_wal_keep_size), a
// restart fails with ErrSlotInvalidated, and with ResnapshotOnInvalidSlot it starts over.
func TestInvalidatedSlot(t *testing.T) {
	c := startCluster(t, map[string]string{"wal_level": "logical", "max_slot_wal_keep_size": "1MB", "max_wal_size": "32MB", "min_wal_size": "32MB"})
	e := &env{pgURL: c.url(clusterPassword), brokers: newEnv(t).brokers, app: uniqueName(t)}
	conn := e.conn(t)
	mustExec(t, conn, "CREATE TABLE inv (id int PRIMARY KEY, pad text)")
	mustExec(t, conn, "INSERT INTO inv VALUES (1, 'a')")
	cfg := e.config(t, "public.inv")
	r := start(t, cfg)
	tp := topic.CDCTable(e.app, "public", "inv")
	wantRows(t, e, tp, map[string]string{"1": `{"id":1,"pad":"a"}`})
	r.stop(t)

	// Write WAL while the source is down until the checkpointer invalidates the slot.
	eventually(t, 60*time.Second, func() string {
		mustExec(t, conn, "INSERT INTO inv SELECT g, repeat('x', 1000) FROM generate_series(2, 20000) g ON CONFLICT (id) DO UPDATE SET pad = excluded.pad || 'y'")
		mustExec(t, conn, "SELECT pg_switch_wal()")
		mustExec(t, conn, "CHECKPOINT")
		var status string
		if err := conn.QueryRow(context.Background(), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", defaultName(e.app)).Scan(&status); err != nil {
			return err.Error()
		}
		if status != "lost" {
			return "slot is " + status
		}
		return ""
	})
	cfg.Registerer = nil
	if err := runErr(t, cfg); !errors.Is(err, ErrSlotInvalidated) {
		t.Fatalf("Run = %v, want ErrSlotInvalidated", err)
	}
	cfg.Registerer = nil
	cfg.ResnapshotOnInvalidSlot = true
	start(t, cfg)
	mustExec(t, conn, "DELETE FROM inv WHERE id > 2")
	want := tableJSON(t, conn, tp, "inv", "id")
	eventually(t, 60*time.Second, func() string {
		rows, msg := stateOf(t, e.brokers, tp)
		if msg != "" {
			return msg
		}
		return diffStates(rows, want)
	})
}
