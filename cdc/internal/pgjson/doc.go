// Package pgjson owns the mapping of Postgres text-format values to JSON: what the CDC source
// writes as a row's value, both for snapshot rows and for pgoutput changes, which arrive in the
// same text format.
//
// # Invariants
//
//   - A value is never converted lossily: numbers keep every digit (they are copied, not parsed
//     into floats), and anything that has no exact JSON form is written as the Postgres text in
//     a JSON string (see [Type.Append]).
//   - The text must come from a session with DateStyle=ISO, TimeZone=UTC, bytea_output=hex and
//     IntervalStyle=postgres; [SessionParams] lists them.
package pgjson
