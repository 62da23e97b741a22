// Package topic builds every Kafka topic name tarn uses, so that each name is spelled in exactly
// one place:
//
//	<app>.<view>.v<N>.<store>.changelog
//	<app>.<view>.v<N>.repartition.<step>
//	<app>.cdc.<schema>.<table>
//	<app>.dlq
//	<app>.versions
//
// It also owns the size limits of the topics tarn writes (limits.go): every record up to the
// configured maximum (16 MiB by default) fits every topic tarn creates, because each is
// created with max.message.bytes to match and producers and consumers are sized alike; a
// larger record is found by [RecordSize] before it is produced and dead-lettered, and Kafka
// refusing one for its size ([IsTooLarge]) is permanent, never retried as it is.
package topic

import (
	"fmt"
	"strconv"
)

// Changelog is the compacted topic that logs one store of one version of a view.
func Changelog(app, view string, version int, store string) string {
	return app + "." + view + ".v" + strconv.Itoa(version) + "." + store + ".changelog"
}

// Repartition is the topic through which a view re-keys its stream at one step.
func Repartition(app, view string, version int, step string) string {
	return app + "." + view + ".v" + strconv.Itoa(version) + ".repartition." + step
}

// CDCTable is the compacted topic that holds one Postgres table, keyed by primary key.
func CDCTable(app, schema, table string) string {
	return app + ".cdc." + schema + "." + table
}

// DLQ is the dead-letter topic of an application.
func DLQ(app string) string {
	return app + ".dlq"
}

// Versions is the compacted, single-partition topic that records, per view (key = view name),
// the serving version, its fingerprint and any version being rebuilt; every instance follows
// it so that all switch to a new version together.
func Versions(app string) string {
	return app + ".versions"
}

// ViewPrefix is the prefix shared by every topic of one version of a view; deleting a version
// deletes the topics with this prefix.
func ViewPrefix(app, view string, version int) string {
	return app + "." + view + ".v" + strconv.Itoa(version) + "."
}

// Group is the consumer group (and transactional id prefix) of one version of a view: each
// version consumes its inputs on its own, so a rebuild reprocesses from the beginning.
func Group(app, view string, version int) string {
	return app + "." + view + ".v" + strconv.Itoa(version)
}

// maxLen is Kafka's limit on topic name length.
const maxLen = 249

// ValidateName reports whether s can be used as one dot-separated part of a topic name (an app
// id, a view, store, step, schema or table name): Kafka allows only ASCII letters, digits, '.',
// '_' and '-', and tarn reserves '.' as the separator.
func ValidateName(kind, s string) error {
	if s == "" {
		return fmt.Errorf("topic: %s name is empty", kind)
	}
	if len(s) > maxLen/4 {
		return fmt.Errorf("topic: %s name %q is longer than %d characters", kind, s, maxLen/4)
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return fmt.Errorf("topic: %s name %q has %q; use only letters, digits, '_' and '-'", kind, s, r)
		}
	}
	return nil
}

// CDCPosition is the compacted, single-partition topic in which the CDC source of one
// replication slot keeps its durable position (written with the records it covers).
func CDCPosition(app, slot string) string {
	return app + ".cdc-position." + slot
}
