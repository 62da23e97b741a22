package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql demo/*.sql
var embedded embed.FS

// FS holds tarn's own migrations, named <version>_<name>.sql: all that `tarn migrate` applies.
var FS, _ = fs.Sub(embedded, "sql")

// DemoFS holds the demo's schema and publication, applied by `tarn demo` only. They keep their
// own version table, so a user's database never gets the demo's tables from `tarn migrate`.
var DemoFS, _ = fs.Sub(embedded, "demo")

// demoTable is the goose version table of DemoFS; tarn's own migrations use goose's default.
const demoTable = "tarn_demo_db_version"

// DemoPublication is the publication of the demo tables.
const DemoPublication = "tarn_demo"

// DemoTables are the demo's tables, schema-qualified as cdc.Config.Tables wants them.
var DemoTables = []string{"public.customers", "public.users", "public.orders"}

// ErrMigrate wraps every failure to migrate; use errors.Is.
var ErrMigrate = errors.New("migrations: cannot migrate")

// Open opens a database/sql handle on a Postgres URL through pgx.
func Open(url string) (*sql.DB, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrMigrate, url, err)
	}
	return db, nil
}

// driver registers "pgx" with database/sql.
var _ = stdlib.GetDefaultDriver

// set is one sequence of migrations with its own version table.
type set struct {
	fsys  fs.FS
	table string // "" for goose's default
}

var (
	tarnSet = set{fsys: FS}
	demoSet = set{fsys: DemoFS, table: demoTable}
)

func provider(db *sql.DB, s set) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true)}
	if s.table != "" {
		opts = append(opts, goose.WithTableName(s.table))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, s.fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	return p, nil
}

// Up applies every migration of tarn's own not yet applied and returns the database's version
// after it.
func Up(ctx context.Context, db *sql.DB) (int64, error) { return up(ctx, db, tarnSet) }

// UpDemo applies the demo's schema and publication (DemoFS) and returns their version.
func UpDemo(ctx context.Context, db *sql.DB) (int64, error) { return up(ctx, db, demoSet) }

func up(ctx context.Context, db *sql.DB, s set) (int64, error) {
	p, err := provider(db, s)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("%w: up: %w", ErrMigrate, err)
	}
	return version(ctx, db, s)
}

// DownTo rolls tarn's own migrations back until the database is at version (0: none applied).
func DownTo(ctx context.Context, db *sql.DB, version int64) error {
	return downTo(ctx, db, tarnSet, version)
}

// DownDemo removes the demo's schema and publication.
func DownDemo(ctx context.Context, db *sql.DB) error { return downTo(ctx, db, demoSet, 0) }

func downTo(ctx context.Context, db *sql.DB, s set, version int64) error {
	p, err := provider(db, s)
	if err != nil {
		return err
	}
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("%w: down to %d: %w", ErrMigrate, version, err)
	}
	return nil
}

// Version is the newest of tarn's own migrations applied to the database (0: none).
func Version(ctx context.Context, db *sql.DB) (int64, error) { return version(ctx, db, tarnSet) }

func version(ctx context.Context, db *sql.DB, s set) (int64, error) {
	p, err := provider(db, s)
	if err != nil {
		return 0, err
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: read version: %w", ErrMigrate, err)
	}
	return v, nil
}
