// Package dbtest is the typed mirror of queries/dbtest/*.sql: the statements only tests run
// (catalog fingerprints for the migration tests, synthetic fixtures, the lookalike guard's
// probes, fault injection that breaks the books on purpose, full-scan summaries). sqlc generates
// every other file of this folder (`make generate`; do not edit them), as for package db, whose
// doc (db/doc.go) says how a statement's comment becomes its method's. Internal, so that no
// service can import it; package ratelimit never runs these statements.
package dbtest
