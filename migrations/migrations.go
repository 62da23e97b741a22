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

//go:embed sql/*.sql
var embedded embed.FS

// FS holds the migrations, named <version>_<name>.sql.
var FS, _ = fs.Sub(embedded, "sql")

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

func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMigrate, err)
	}
	return p, nil
}

// Up applies every migration not yet applied and returns the database's version after it.
func Up(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("%w: up: %w", ErrMigrate, err)
	}
	return Version(ctx, db)
}

// DownTo rolls migrations back until the database is at version (0: none applied).
func DownTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("%w: down to %d: %w", ErrMigrate, version, err)
	}
	return nil
}

// Version is the newest migration applied to the database (0: none).
func Version(ctx context.Context, db *sql.DB) (int64, error) {
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: read version: %w", ErrMigrate, err)
	}
	return v, nil
}
