package ratelimit

import (
	"encoding/hex"

	"github.com/jackc/pgx/v5/pgtype"
)

// parseOptionalID parses a UUID in its text form; "" is NULL.
func parseOptionalID(field, s string) (pgtype.UUID, error) {
	if s == "" {
		return pgtype.UUID{}, nil
	}
	return parseID(field, s)
}

// parseID parses a required UUID in its text form.
func parseID(field, s string) (pgtype.UUID, error) {
	var id pgtype.UUID
	if len(s) != 36 || id.Scan(s) != nil {
		return pgtype.UUID{}, &ValidationError{Field: field, Value: s, Reason: "must be a UUID like 123e4567-e89b-12d3-a456-426614174000"}
	}
	return id, nil
}

// parseIDs parses a list of UUIDs, naming the first bad one.
func parseIDs(field string, ss []string) ([]pgtype.UUID, error) {
	ids := make([]pgtype.UUID, len(ss))
	for i, s := range ss {
		id, err := parseID("", s)
		if err != nil {
			return nil, inElement(field, i, err)
		}
		ids[i] = id
	}
	return ids, nil
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
