// Package enrich owns joins: stream–table joins against co-partitioned table copies, global
// tables copied whole to every instance, cached lookups in an external store kept fresh by CDC,
// and windowed stream–stream joins.
package enrich
