package cdc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/tarnhq/tarn/cdc/internal/pgjson"
	"github.com/tarnhq/tarn/internal/topic"
)

// table is one replicated table as the catalog describes it.
type table struct {
	qualified  string // schema.table
	schema     string
	name       string
	topic      string
	partitions int32
	oid        uint32
	// keyNames are the key columns in column order: the primary key, else the replica
	// identity index, else (REPLICA IDENTITY FULL) every column, in which case fullKey is set
	// and keys use the nullable array form.
	keyNames []string
	fullKey  bool
	// identityFull: old tuples of updates and deletes carry every column.
	identityFull bool
	columns      []column
}

type column struct {
	name string
	typ  *pgjson.Type
	key  bool
}

// connect opens a SQL connection with the session settings pgjson parses. The source keeps
// one per goroutine that needs one (catalog, snapshot, heartbeat): pgx.Conn is not safe for
// concurrent use.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: PostgresURL: %w", ErrConfig, err)
	}
	for k, v := range pgjson.SessionParams {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classifyConnect(err, cfg.User, false)
	}
	return conn, nil
}

func checkWalLevel(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("cdc: read wal_level: %w", err)
	}
	if level != "logical" {
		return faultf(ErrWalLevel, nil, "cdc: wal_level is %q, not logical: run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart Postgres", level)
	}
	return nil
}

// loadTable reads a table's identity and columns and refuses tables that cannot be keyed.
func loadTable(ctx context.Context, conn *pgx.Conn, types *typeCache, app, qualified string, partitions int32) (*table, error) {
	schema, name, _ := splitTable(qualified)
	t := &table{qualified: qualified, schema: schema, name: name, partitions: partitions,
		topic: topic.CDCTable(app, schema, name)}
	var (
		ident, role      string
		usable, readable bool
	)
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relreplident::text, has_schema_privilege(n.oid, 'USAGE'),
			has_table_privilege(c.oid, 'SELECT'), current_user::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(&t.oid, &ident, &usable, &readable, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, faultf(ErrTableMissing, nil, "cdc: table %s does not exist: create it, or stop replicating it", qualified)
	}
	if err != nil {
		return nil, fmt.Errorf("cdc: read table %s: %w", qualified, err)
	}
	// Checked here rather than left to the snapshot's SELECT, which would fail only after the
	// slot exists and with a message that names no fix.
	if !usable {
		return nil, faultf(ErrPrivilege, nil, "cdc: role %q cannot use schema %s: GRANT USAGE ON SCHEMA %s TO %s", role, schema, quoteIdent(schema), quoteIdent(role))
	}
	if !readable {
		return nil, faultf(ErrPrivilege, nil, "cdc: role %q cannot read table %s: GRANT SELECT ON %s TO %s", role, qualified, t.ident(), quoteIdent(role))
	}
	if ident == "n" {
		// Deletes and key changes would arrive without any key.
		return nil, faultf(ErrNoPrimaryKey, nil, "cdc: table %s has REPLICA IDENTITY NOTHING, so its deletes carry no key: ALTER TABLE %s REPLICA IDENTITY DEFAULT (with a primary key) or REPLICA IDENTITY FULL",
			qualified, t.ident())
	}
	t.identityFull = ident == "f"
	if t.keyNames, err = keyColumns(ctx, conn, t.oid, ident); err != nil {
		return nil, fmt.Errorf("cdc: read key of %s: %w", qualified, err)
	}
	if len(t.keyNames) == 0 && !t.identityFull {
		return nil, faultf(ErrNoPrimaryKey, nil, "cdc: table %s has no primary key: add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or ALTER TABLE %s REPLICA IDENTITY FULL",
			qualified, t.ident(), t.ident())
	}
	if err := t.loadColumns(ctx, conn, types); err != nil {
		return nil, err
	}
	if len(t.keyNames) == 0 {
		t.fullKey = true
		for _, c := range t.columns {
			t.keyNames = append(t.keyNames, c.name)
		}
	}
	for i := range t.columns {
		t.columns[i].key = slices.Contains(t.keyNames, t.columns[i].name)
	}
	return t, nil
}

// keyColumns lists the primary key (or, for REPLICA IDENTITY USING INDEX, that index's)
// columns in column order, which is also the order pgoutput sends them in.
func keyColumns(ctx context.Context, conn *pgx.Conn, oid uint32, ident string) ([]string, error) {
	cond := "i.indisprimary"
	if ident == "i" {
		cond = "i.indisreplident"
	}
	rows, err := conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND `+cond+` ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (t *table) loadColumns(ctx context.Context, conn *pgx.Conn, types *typeCache) error {
	rows, err := conn.Query(ctx, `SELECT attname, atttypid FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, t.oid)
	if err != nil {
		return fmt.Errorf("cdc: read columns of %s: %w", t.qualified, err)
	}
	type col struct {
		Name string
		OID  uint32
	}
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[col])
	if err != nil {
		return fmt.Errorf("cdc: read columns of %s: %w", t.qualified, err)
	}
	t.columns = t.columns[:0]
	for _, c := range cols {
		typ, err := types.get(ctx, c.OID)
		if err != nil {
			return err
		}
		t.columns = append(t.columns, column{name: c.Name, typ: typ})
	}
	return nil
}

// selectList is the snapshot's column list, quoted.
func (t *table) selectList() string {
	names := make([]string, len(t.columns))
	for i, c := range t.columns {
		names[i] = pgx.Identifier{c.name}.Sanitize()
	}
	return strings.Join(names, ", ")
}

func (t *table) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// identList is the tables quoted and comma-separated, as CREATE PUBLICATION takes them.
func identList(ts []*table) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.ident()
	}
	return strings.Join(s, ", ")
}

// typeCache resolves type OIDs to their JSON mapping, following domains to their base type
// and arrays to their element type.
type typeCache struct {
	conn *pgx.Conn
	mu   struct {
		sync.Mutex
		types map[uint32]*pgjson.Type
	}
}

func newTypeCache(conn *pgx.Conn) *typeCache {
	c := &typeCache{conn: conn}
	c.mu.types = map[uint32]*pgjson.Type{}
	return c
}

func (c *typeCache) get(ctx context.Context, oid uint32) (*pgjson.Type, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(ctx, oid, 0)
}

func (c *typeCache) getLocked(ctx context.Context, oid uint32, depth int) (*pgjson.Type, error) {
	if t, ok := c.mu.types[oid]; ok {
		return t, nil
	}
	if depth > 8 {
		return nil, fmt.Errorf("cdc: type %d: domains or arrays nested too deeply", oid)
	}
	var (
		name, typtype, category, delim string
		elem, base                     uint32
	)
	err := c.conn.QueryRow(ctx, `SELECT typname::text, typtype::text, typcategory::text, typelem, typdelim::text, typbasetype
		FROM pg_type WHERE oid = $1`, oid).Scan(&name, &typtype, &category, &elem, &delim, &base)
	if err != nil {
		return nil, fmt.Errorf("cdc: read type %d: %w", oid, err)
	}
	t := &pgjson.Type{OID: oid, Name: name, Kind: pgjson.KindOf(oid), Delim: delim[0]}
	switch {
	case typtype == "d":
		b, err := c.getLocked(ctx, base, depth+1)
		if err != nil {
			return nil, err
		}
		t.Kind, t.Elem, t.Delim = b.Kind, b.Elem, b.Delim
	case category == "A" && elem != 0:
		e, err := c.getLocked(ctx, elem, depth+1)
		if err != nil {
			return nil, err
		}
		t.Kind, t.Elem = pgjson.Array, e
		t.Delim = e.Delim
	}
	c.mu.types[oid] = t
	return t, nil
}

// ensurePublication creates the publication for the tables when it is missing. When it
// exists, every table must be in it; on a fresh start (no slot yet) missing tables are added.
func ensurePublication(ctx context.Context, conn *pgx.Conn, pub string, tables []*table, fresh bool) error {
	exists, published, err := publicationTables(ctx, conn, pub)
	if err != nil {
		return err
	}
	if !exists {
		if !fresh {
			return fmt.Errorf("%w: %q: it was dropped after the slot was created; recreate it (CREATE PUBLICATION %s FOR TABLE %s), or drop the slot to start over", ErrPublicationMissing, pub, pub, identList(tables))
		}
		_, err := conn.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+identList(tables))
		if err != nil {
			return createPublicationError(pub, identList(tables), err)
		}
		return nil
	}
	var missing []*table
	for _, t := range tables {
		if !published[t.qualified] {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !fresh {
		return fmt.Errorf("%w: %q lacks %s; add them and start over with a fresh slot", ErrPublicationTables, pub, identList(missing))
	}
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+pub+" ADD TABLE "+identList(missing)); err != nil {
		return fmt.Errorf("cdc: add %s to publication %s: %w", identList(missing), pub, err)
	}
	return nil
}

func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) (bool, map[string]bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return false, nil, fmt.Errorf("cdc: read publication %s: %w", pub, err)
	}
	if !exists {
		return false, nil, nil
	}
	rows, err := conn.Query(ctx, "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1", pub)
	if err != nil {
		return false, nil, fmt.Errorf("cdc: read tables of publication %s: %w", pub, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, nil, fmt.Errorf("cdc: read tables of publication %s: %w", pub, err)
	}
	published := map[string]bool{}
	for _, n := range names {
		published[n] = true
	}
	return true, published, nil
}

// slotState is a row of pg_replication_slots.
type slotState struct {
	exists    bool
	confirmed LSN
	walStatus string // reserved, extended, unreserved or lost
	lagBytes  int64
}

func readSlot(ctx context.Context, conn *pgx.Conn, slot string) (slotState, error) {
	var (
		s         slotState
		confirmed *string
		status    *string
		lag       *int64
	)
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, wal_status,
			(pg_current_wal_lsn() - confirmed_flush_lsn)::int8
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed, &status, &lag)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("cdc: read slot %s: %w", slot, err)
	}
	s.exists = true
	if confirmed != nil {
		if s.confirmed, err = ParseLSN(*confirmed); err != nil {
			return s, err
		}
	}
	if status != nil {
		s.walStatus = *status
	}
	if lag != nil {
		s.lagBytes = *lag
	}
	return s, nil
}

func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
	if err != nil {
		return fmt.Errorf("cdc: drop slot %s: %w", slot, err)
	}
	return nil
}

// createPublicationError names the fix when the role may not create the publication: only a
// table's owner (or a superuser) can publish it.
func createPublicationError(pub, tables string, err error) error {
	if pgCode(err) == codeInsufficientPriv {
		return faultf(ErrPrivilege, err, "cdc: the role may not create publication %s: run CREATE PUBLICATION %s FOR TABLE %s as the tables' owner, or make the role own them",
			pub, pub, tables)
	}
	return fmt.Errorf("cdc: create publication %s (the role must own the tables): %w", pub, err)
}
