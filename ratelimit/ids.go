package ratelimit

import (
	"bytes"
	"encoding/hex"
	"slices"

	"github.com/jackc/pgx/v5/pgtype"
)

// parseOptionalID parses a UUID in its text form; "" is NULL.
func parseOptionalID(field, s string) (pgtype.UUID, error) {
	if s == "" {
		return pgtype.UUID{}, nil
	}
	return parseID(field, s)
}

// parseID parses a required UUID in its text form. The hyphens are checked
// here: pgtype skips the four places they belong in without looking at
// them, so "123e4567+e89b+..." would pass for the UUID it resembles.
func parseID(field, s string) (pgtype.UUID, error) {
	var id pgtype.UUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' || id.Scan(s) != nil {
		return pgtype.UUID{}, &ValidationError{Field: field, Value: shown(s), Reason: "must be a UUID like 123e4567-e89b-12d3-a456-426614174000"}
	}
	return id, nil
}

// parseIDs parses a list of UUIDs, naming the first bad one.
func parseIDs(field string, ss []string) ([]pgtype.UUID, error) {
	return parseIDsAt(field, ss, nil)
}

// parseIDsAt parses a list of UUIDs taken out of a longer list (a grant's
// reservations less its Local ones), naming the first bad one, ss[k], by
// its place in that list, at[k]; a nil at means ss is the whole list.
func parseIDsAt(field string, ss []string, at []int) ([]pgtype.UUID, error) {
	ids := make([]pgtype.UUID, len(ss))
	for k, s := range ss {
		id, err := parseID("", s)
		if err != nil {
			return nil, inElement(field, place(at, k), err)
		}
		ids[k] = id
	}
	return ids, nil
}

// place is the position in the whole list of element k of a part of it
// (see parseIDsAt).
func place(at []int, k int) int {
	if at == nil {
		return k
	}
	return at[k]
}

// idString formats a UUID as text; a NULL UUID is "".
func idString(id pgtype.UUID) string {
	if !id.Valid {
		return ""
	}
	var buf [36]byte
	hex.Encode(buf[0:8], id.Bytes[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id.Bytes[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id.Bytes[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id.Bytes[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], id.Bytes[10:16])
	return string(buf[:])
}

// idOrder is the permutation that sorts ids as PostgreSQL orders uuids
// (their bytes): ids[order[0]] is the least. Leases are locked in id order
// wherever a statement locks several (the lease lock order), so that two
// statements locking the same leases wait for each other instead of
// deadlocking.
func idOrder(ids []pgtype.UUID) []int {
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return bytes.Compare(ids[i].Bytes[:], ids[j].Bytes[:]) })
	return order
}

// permuted is xs in the given order: element k is xs[order[k]].
func permuted[T any](xs []T, order []int) []T {
	out := make([]T, len(order))
	for k, i := range order {
		out[k] = xs[i]
	}
	return out
}
