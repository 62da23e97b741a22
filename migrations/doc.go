// Package migrations owns the SQL that tarn applies to Postgres, as pressly/goose migrations
// embedded in the binary: what tarn itself needs (its schema, a read role and its grants), which
// `tarn migrate` applies ([Up]), and apart from it the demo schema (customers, users, orders)
// with its publication, which only `tarn demo` applies ([UpDemo]), with a version table of its
// own.
//
// # Invariants
//
//   - Migrations are applied in version order under a Postgres advisory lock, so concurrent
//     [Up] calls against one database apply each migration once.
//   - [DemoTables] and [DemoPublication] name exactly what the migrations create.
package migrations
