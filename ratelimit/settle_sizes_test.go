package ratelimit_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// settleSizes records how many reservations each AdmissionSettle statement
// a pool sends is given, alone or in a batch.
type settleSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (s *settleSizes) record(sql string, args []any) {
	if !strings.HasPrefix(sql, "-- name: AdmissionSettle ") || len(args) == 0 {
		return
	}
	ids, _ := args[0].([]pgtype.UUID)
	s.mu.Lock()
	s.sizes = append(s.sizes, len(ids))
	s.mu.Unlock()
}

func (s *settleSizes) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.record(d.SQL, d.Args)
	return ctx
}

func (s *settleSizes) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *settleSizes) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *settleSizes) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.record(d.SQL, d.Args)
}

func (s *settleSizes) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// reset forgets what was recorded.
func (s *settleSizes) reset() {
	s.mu.Lock()
	s.sizes = nil
	s.mu.Unlock()
}

// largest is the most reservations one recorded statement was given, and
// how many statements were recorded.
func (s *settleSizes) largest() (most, statements int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.sizes {
		most = max(most, n)
	}
	return most, len(s.sizes)
}

// settleSizedPool is a pool of a fresh database whose AdmissionSettle
// statements the returned settleSizes records.
func settleSizedPool(t *testing.T) (*pgxpool.Pool, *settleSizes) {
	t.Helper()
	sizes := &settleSizes{}
	return poolTracedBy(t, sizes), sizes
}
