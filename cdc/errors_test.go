package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

func pgErr(code, msg string) error {
	return &pgconn.PgError{Severity: "FATAL", Code: code, Message: msg}
}

// TestClassifyConnect: each refusal of a connection becomes the error that names the role and
// the fix, and is permanent; a server that is away is not.
func TestClassifyConnect(t *testing.T) {
	for _, tt := range []struct {
		name        string
		err         error
		replication bool
		kind        error
		says        []string
	}{
		{"wrong password", pgErr("28P01", `password authentication failed for user "app"`), false, ErrAuth,
			[]string{`role "app"`, "password"}},
		{"no pg_hba entry", pgErr("28000", `no pg_hba.conf entry for host "10.0.0.1"`), false, ErrAuth,
			[]string{`role "app"`, "pg_hba.conf"}},
		{"no REPLICATION", pgErr("42501", "must be superuser or replication role to start walsender"), true, ErrNoReplication,
			[]string{`role "app" lacks REPLICATION`, `ALTER ROLE "app" REPLICATION`}},
		{"no replication line in pg_hba", pgErr("28000", `no pg_hba.conf entry for replication connection`), true, ErrNoReplication,
			[]string{"host replication app"}},
		{"wrong password on the replication connection", pgErr("28P01", "password authentication failed"), true, ErrAuth,
			[]string{`role "app"`}},
		{"no database", pgErr("3D000", `database "nope" does not exist`), false, ErrConfig, []string{"database"}},
	} {
		got := classifyConnect(&pgconn.ConnectError{Config: &pgconn.Config{}}, "app", tt.replication) // no PgError inside
		if IsPermanent(got) {
			t.Errorf("%s: a connect error without a server error is permanent: %v", tt.name, got)
		}
		got = classifyConnect(fmt.Errorf("connect: %w", tt.err), "app", tt.replication)
		if !errors.Is(got, tt.kind) || !IsPermanent(got) {
			t.Errorf("%s: %v: want %v, permanent", tt.name, got, tt.kind)
		}
		var pe *pgconn.PgError
		if !errors.As(got, &pe) {
			t.Errorf("%s: %v does not wrap the server's error", tt.name, got)
		}
		for _, s := range tt.says {
			if !strings.Contains(got.Error(), s) {
				t.Errorf("%s: %q does not say %q", tt.name, got, s)
			}
		}
	}
}

// TestIsPermanent: what needs an operator is permanent; an unreachable or restarting server,
// a reset connection, a busy slot and retriable Kafka errors are not.
func TestIsPermanent(t *testing.T) {
	r := &runner{cfg: &Config{Publication: "p", Slot: "s"}, user: "app"}
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("%w: x", ErrConfig), true},
		{faultf(ErrTableMissing, nil, "cdc: table public.t does not exist"), true},
		{faultf(ErrNoPrimaryKey, nil, "cdc: table public.t has no primary key"), true},
		{faultf(ErrWalLevel, nil, "cdc: wal_level is replica"), true},
		{faultf(ErrPrivilege, nil, "cdc: role cannot read"), true},
		{r.classifyStream(pgErr("42704", `publication "p" does not exist`)), true},
		{r.classifyStream(pgErr("42501", "permission denied to start WAL sender")), true},
		{r.classifyStream(pgErr("55006", `replication slot "s" is active`)), false},
		{fmt.Errorf("snapshot: %w", pgErr("42501", "permission denied for table t")), true},
		{fmt.Errorf("read: %w", pgErr("42P01", `relation "t" does not exist`)), true},
		{pgErr("57P01", "terminating connection due to administrator command"), false},
		{pgErr("57P03", "the database system is starting up"), false},
		{pgErr("53300", "too many connections"), false},
		{pgErr("08006", "connection failure"), false},
		{fmt.Errorf("cdc: connect to Postgres: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), false},
		{fmt.Errorf("cdc: replication stream: %w", io.ErrUnexpectedEOF), false},
		{fmt.Errorf("cdc: emit heartbeat: %w", syscall.ECONNRESET), false},
		{context.DeadlineExceeded, false},
		{fmt.Errorf("cdc: produce: %w", kerr.NotLeaderForPartition), false},
		{fmt.Errorf("cdc: produce: %w", kerr.TopicAuthorizationFailed), true},
		{fmt.Errorf("%w: busy", ErrSlotBusy), false},
	} {
		if got := IsPermanent(tt.err); got != tt.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestPublicationMissingMessage: the fix names the statement that recreates the publication.
func TestPublicationMissingMessage(t *testing.T) {
	r := &runner{cfg: &Config{Publication: "tarn_shop", Slot: "tarn_shop"}, user: "app",
		tables: []*table{{schema: "public", name: "users"}, {schema: "public", name: "orders"}}}
	err := r.classifyStream(pgErr("42704", `publication "tarn_shop" does not exist`))
	want := `CREATE PUBLICATION tarn_shop FOR TABLE "public"."users", "public"."orders"`
	if !errors.Is(err, ErrPublicationMissing) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want ErrPublicationMissing saying %s", err, want)
	}
}

// TestFaultMessage: a fault reads as what was wrong, the fix, then the server's words.
func TestFaultMessage(t *testing.T) {
	cause := pgErr("42501", "must be superuser or replication role to start walsender")
	err := classifyConnect(cause, "x", true)
	want := `cdc: role "x" lacks REPLICATION: ALTER ROLE "x" REPLICATION: FATAL: must be superuser or replication role to start walsender (SQLSTATE 42501)`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if errorKind(err) != "permanent" || errorKind(fmt.Errorf("%w", ErrSlotBusy)) != "slot_busy" || errorKind(io.EOF) != "transient" {
		t.Errorf("errorKind does not tell permanent, slot_busy and transient errors apart")
	}
}
