package cdc

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors of the source; use errors.Is. Each is wrapped with the details of the case.
var (
	// ErrAuth: Postgres refused the credentials in PostgresURL.
	ErrAuth = errors.New("cdc: Postgres refused the credentials; check the user and password in PostgresURL")
	// ErrWalLevel: the server's wal_level is not logical.
	ErrWalLevel = errors.New("cdc: wal_level is not logical; set wal_level = logical in postgresql.conf and restart Postgres")
	// ErrNoReplication: the role lacks the REPLICATION attribute or pg_hba.conf refuses
	// replication connections.
	ErrNoReplication = errors.New("cdc: cannot open a replication connection; grant the role REPLICATION and allow it in pg_hba.conf")
	// ErrTableMissing: a configured table does not exist.
	ErrTableMissing = errors.New("cdc: table does not exist")
	// ErrNoPrimaryKey: a table has neither a primary key (or replica identity index) nor
	// REPLICA IDENTITY FULL, so its updates and deletes cannot be keyed.
	ErrNoPrimaryKey = errors.New("cdc: table has no primary key; add one or run ALTER TABLE ... REPLICA IDENTITY FULL")
	// ErrPublicationMissing: the publication of an existing slot was dropped.
	ErrPublicationMissing = errors.New("cdc: publication does not exist")
	// ErrPublicationTables: an existing publication does not publish a configured table.
	ErrPublicationTables = errors.New("cdc: publication does not publish every configured table")
	// ErrSlotInvalidated: the server removed WAL the slot still needed (max_slot_wal_keep_size).
	// ErrSlotBusy: another connection (another instance running this source) holds the slot.
	// Only one source can stream a slot; the others stand by and retry.
	ErrSlotBusy        = errors.New("cdc: replication slot is in use by another connection; another instance runs this source")
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

// Postgres error codes (Appendix A of the manual).
const (
	codeInvalidPassword   = "28P01"
	codeInvalidAuth       = "28000"
	codeUndefinedObject   = "42704"
	codeObjectNotInPrereq = "55000"
	codeInsufficientPriv  = "42501"
	codeDuplicateObject   = "42710"
	codeObjectInUse       = "55006"
)

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// classifyConnect turns a connection failure into the source's error for it.
func classifyConnect(err error, replication bool) error {
	switch pgCode(err) {
	case codeInvalidPassword:
		return fmt.Errorf("%w: %w", ErrAuth, err)
	case codeInvalidAuth, codeInsufficientPriv:
		if replication {
			return fmt.Errorf("%w: %w", ErrNoReplication, err)
		}
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return fmt.Errorf("cdc: connect to Postgres: %w", err)
}

// classifyStream turns an error of the replication stream into the source's error for it.
func classifyStream(err error, publication, slot string) error {
	switch pgCode(err) {
	case codeUndefinedObject:
		return fmt.Errorf("%w: %q (slot %s): recreate it, or drop the slot and the source's topics to start over: %w", ErrPublicationMissing, publication, slot, err)
	case codeObjectNotInPrereq:
		return fmt.Errorf("%w: %s: %w", ErrSlotInvalidated, slot, err)
	case codeObjectInUse:
		return fmt.Errorf("%w: %s: %w", ErrSlotBusy, slot, err)
	}
	return fmt.Errorf("cdc: replication stream: %w", err)
}
