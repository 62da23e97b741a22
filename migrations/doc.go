// Package migrations owns the SQL that tarn applies to Postgres: what tarn itself needs
// (publication, grants) and the demo schema.
package migrations
