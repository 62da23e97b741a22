package cdc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Errors of the source; use errors.Is. Each is wrapped with the details of the case: what
// was wrong (the role, table, setting) and the statement or setting that fixes it.
// [IsPermanent] tells which ones retrying cannot fix.
var (
	// ErrAuth: Postgres refused the credentials in PostgresURL.
	ErrAuth = errors.New("cdc: Postgres refused the credentials")
	// ErrWalLevel: the server's wal_level is not logical.
	ErrWalLevel = errors.New("cdc: wal_level is not logical")
	// ErrNoReplication: the role lacks the REPLICATION attribute or pg_hba.conf refuses
	// replication connections.
	ErrNoReplication = errors.New("cdc: cannot open a replication connection")
	// ErrPrivilege: the role lacks a privilege the source needs (SELECT on a table,
	// ownership of the tables to create the publication).
	ErrPrivilege = errors.New("cdc: the role lacks a privilege")
	// ErrTableMissing: a configured table does not exist.
	ErrTableMissing = errors.New("cdc: table does not exist")
	// ErrNoPrimaryKey: a table has neither a primary key (or replica identity index) nor
	// REPLICA IDENTITY FULL, so its updates and deletes cannot be keyed.
	ErrNoPrimaryKey = errors.New("cdc: table has no primary key")
	// ErrPublicationMissing: the publication of an existing slot was dropped.
	ErrPublicationMissing = errors.New("cdc: publication does not exist")
	// ErrPublicationTables: an existing publication does not publish a configured table.
	ErrPublicationTables = errors.New("cdc: publication does not publish every configured table")
	// ErrSlotBusy: another connection (another instance running this source) holds the slot.
	// Only one source can stream a slot; the others stand by and retry.
	ErrSlotBusy = errors.New("cdc: replication slot is in use by another connection; another instance runs this source")
	// ErrSlotInvalidated: the server removed WAL the slot still needed (max_slot_wal_keep_size).
	ErrSlotInvalidated = errors.New("cdc: replication slot is invalidated; set ResnapshotOnInvalidSlot to start over with a fresh snapshot")
	// ErrSlotMissing: the source has a position but its slot is gone.
	ErrSlotMissing = errors.New("cdc: replication slot is missing although the source has a position; set ResnapshotOnInvalidSlot to start over with a fresh snapshot")
	// ErrSlotAhead: the slot's confirmed position is after the source's durable position, so
	// the server would skip changes that were never written ("slot overcompacted").
	ErrSlotAhead = errors.New("cdc: replication slot is ahead of the source's durable position; changes would be lost")
	// ErrServerChanged: the system identifier or timeline differs from the one the position was
	// taken on (a different server, or a failover).
	ErrServerChanged = errors.New("cdc: Postgres server identity or timeline changed since the position was written")
	// ErrPartitions: an existing topic has a different partition count than configured.
	ErrPartitions = errors.New("cdc: topic partition count differs from the configured one")
	// ErrToastMissing: an update left a TOASTed column unchanged and no previous value is known.
	ErrToastMissing = errors.New("cdc: no previous value for an unchanged TOAST column")
	// ErrProtocol: the replication stream carried something the source cannot interpret.
	ErrProtocol = errors.New("cdc: unexpected replication message")
)

// permanent are the errors that need an operator's change (a setting, a grant, a table, a
// slot) before the source can run: running it again cannot succeed.
var permanent = []error{ErrConfig, ErrAuth, ErrWalLevel, ErrNoReplication, ErrPrivilege, ErrTableMissing,
	ErrNoPrimaryKey, ErrPublicationMissing, ErrPublicationTables, ErrSlotInvalidated, ErrSlotMissing,
	ErrSlotAhead, ErrServerChanged, ErrPartitions, ErrToastMissing, ErrProtocol}

// IsPermanent reports whether err, returned by [Source.Run], needs an operator's change before
// the source can run: bad configuration or credentials, a missing privilege or server setting,
// a table, publication or slot that is missing or unusable, Kafka refusing authorization.
// Everything else (a server unreachable or restarting, a reset connection, a slot still held
// by a previous run, [ErrSlotBusy]) may pass by itself, and Run may be called again.
func IsPermanent(err error) bool {
	if err == nil || errors.Is(err, ErrSlotBusy) {
		return false
	}
	for _, p := range permanent {
		if errors.Is(err, p) {
			return true
		}
	}
	if permanentCode(pgCode(err)) {
		return true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch ke {
		case kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
			kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed, kerr.PolicyViolation:
			return true
		}
	}
	return false
}

// permanentCode tells the Postgres errors that no retry fixes. The others (class 08
// connection exceptions, 57P01 admin shutdown, 57P03 cannot connect now, 53300 too many
// connections, serialization failures) pass when the server recovers.
func permanentCode(code string) bool {
	if strings.HasPrefix(code, "28") { // invalid authorization specification
		return true
	}
	switch code {
	case codeInsufficientPriv, codeUndefinedTable, codeUndefinedObject, codeObjectNotInPrereq,
		codeInvalidCatalog, codeFeatureNotSupported:
		return true
	}
	return false
}

// Postgres error codes (Appendix A of the manual).
const (
	codeInvalidPassword     = "28P01"
	codeInvalidAuth         = "28000"
	codeInvalidCatalog      = "3D000" // database does not exist
	codeUndefinedTable      = "42P01"
	codeUndefinedObject     = "42704"
	codeObjectNotInPrereq   = "55000"
	codeInsufficientPriv    = "42501"
	codeDuplicateObject     = "42710"
	codeObjectInUse         = "55006"
	codeFeatureNotSupported = "0A000"
)

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// fault is an error that reads as what was wrong, what to do, and what the server said,
// while errors.Is finds its kind (one of the sentinels above) and its cause.
type fault struct {
	kind  error
	msg   string
	cause error
}

func faultf(kind, cause error, format string, args ...any) error {
	return &fault{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}

func (f *fault) Error() string {
	if f.cause == nil {
		return f.msg
	}
	return f.msg + ": " + f.cause.Error()
}

func (f *fault) Unwrap() []error {
	if f.cause == nil {
		return []error{f.kind}
	}
	return []error{f.kind, f.cause}
}

// quoteIdent quotes a role or table name for the statements the messages suggest.
func quoteIdent(parts ...string) string { return pgx.Identifier(parts).Sanitize() }

// classifyConnect turns a connection failure of role user into the source's error for it.
func classifyConnect(err error, user string, replication bool) error {
	switch code := pgCode(err); {
	case code == codeInsufficientPriv && replication:
		return faultf(ErrNoReplication, err, "cdc: role %q lacks REPLICATION: ALTER ROLE %s REPLICATION", user, quoteIdent(user))
	case code == codeInvalidAuth && replication:
		return faultf(ErrNoReplication, err, "cdc: pg_hba.conf refuses replication connections of role %q: add a line like \"host replication %s <client address> scram-sha-256\" and reload Postgres",
			user, user)
	case code == codeInvalidPassword || code == codeInvalidAuth:
		return faultf(ErrAuth, err, "cdc: Postgres refused role %q: check the user and password of the Postgres URL (and pg_hba.conf)", user)
	case code == codeInvalidCatalog:
		return faultf(ErrConfig, err, "cdc: the database of the Postgres URL does not exist: create it or fix the URL")
	}
	return fmt.Errorf("cdc: connect to Postgres: %w", err)
}

// classifyStream turns an error of the replication stream (or of a replication command) into
// the source's error for it.
func (r *runner) classifyStream(err error) error {
	pub, slot := r.cfg.Publication, r.cfg.Slot
	switch pgCode(err) {
	case codeUndefinedObject:
		return faultf(ErrPublicationMissing, err, "cdc: publication %q (slot %s) does not exist: recreate it (CREATE PUBLICATION %s FOR TABLE %s), or drop the slot and the source's topics to start over",
			pub, slot, pub, identList(r.tables))
	case codeObjectNotInPrereq:
		return fmt.Errorf("%w: %s: %w", ErrSlotInvalidated, slot, err)
	case codeObjectInUse:
		return fmt.Errorf("%w: %s: %w", ErrSlotBusy, slot, err)
	case codeInsufficientPriv:
		return faultf(ErrNoReplication, err, "cdc: role %q lacks REPLICATION: ALTER ROLE %s REPLICATION", r.user, quoteIdent(r.user))
	}
	return fmt.Errorf("cdc: replication stream: %w", err)
}

// errorKind is the label of tarn_cdc_errors_total for err.
func errorKind(err error) string {
	switch {
	case errors.Is(err, ErrSlotBusy):
		return "slot_busy"
	case IsPermanent(err):
		return "permanent"
	}
	return "transient"
}
