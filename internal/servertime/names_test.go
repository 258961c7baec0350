package servertime

import (
	"strings"
	"testing"
)

func TestNameOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ query, want string }{
		{"-- name: AdmissionReserveOne :one\nSELECT r.fits FROM pgadmit_reserve_one($1)", "AdmissionReserveOne"},
		{"UPDATE gateway_rate_limit_counters AS c\n   SET reserved_value = c.reserved_value - v_released", "UPDATE gateway_rate_limit_counters AS c SET reserved_value = c.reserv..."},
		{"SELECT $1", "SELECT $1"},
		{"-- name: ", "-- name:"},
	} {
		if got := nameOf(tc.query); got != tc.want {
			t.Errorf("nameOf(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
	if got := shorten(strings.Repeat("é", 50), 10); len(got) > 10 || !strings.HasSuffix(got, "...") || strings.ContainsRune(got, '\uFFFD') {
		t.Errorf("shorten cut a UTF-8 sequence or went over: %q", got)
	}
}

func TestAttribute(t *testing.T) {
	t.Parallel()
	funcs := map[string]string{
		"pgadmit_reserve_one": `
DECLARE
    v_fits boolean;
BEGIN
    WITH counter AS (
        INSERT INTO gateway_rate_limit_counters AS c (scope_type, scope_key, metric)
        VALUES (p_scope_type, p_scope_key, p_metric)
        ON CONFLICT DO NOTHING
        RETURNING c.used_value
    )
    SELECT counter.used_value + 1 <= p_limit INTO v_fits FROM counter;
    RETURN QUERY SELECT v_fits;
END;`,
		"pgadmit_settle_one": `
BEGIN
    UPDATE gateway_rate_limit_counters AS c
       SET reserved_value = c.reserved_value - v_released,
           used_value = c.used_value + v_used
     WHERE c.scope_type = v_scope_type AND c.scope_key = v_scope_key;
    PERFORM 1 FROM gateway_rate_limit_counters AS c WHERE c.scope_type = v_scope_type AND c.scope_key = v_scope_key AND c.metric = 'requests';
END;`,
	}
	ss := []Statement{
		{TopLevel: true, Query: "-- name: AdmissionReserveOne :one\nSELECT r.fits::boolean FROM pgadmit_reserve_one($1, $2) AS r"},
		{TopLevel: true, Query: "-- name: OpsNow :one\nSELECT clock_timestamp()"},
		// Nested: as PL/pgSQL hands them on, whitespace changed, INTO cut out, constants as $n.
		{Query: "WITH counter AS ( INSERT INTO gateway_rate_limit_counters AS c (scope_type, scope_key, metric) VALUES (p_scope_type, p_scope_key, p_metric) ON CONFLICT DO NOTHING RETURNING c.used_value ) SELECT counter.used_value + $1 <= p_limit  FROM counter"},
		{Query: "UPDATE gateway_rate_limit_counters AS c\n SET reserved_value = c.reserved_value - v_released, used_value = c.used_value + v_used WHERE c.scope_type = v_scope_type AND c.scope_key = v_scope_key"},
		{Query: "SELECT $1 FROM gateway_rate_limit_counters AS c WHERE c.scope_type = v_scope_type AND c.scope_key = v_scope_key AND c.metric = $2"},
		{Query: "SELECT v_fits"},                             // too short to tell
		{Query: "SELECT something_else FROM elsewhere AS e"}, // in no body
	}
	Attribute(ss, funcs)
	for i, want := range []string{"pgadmit_reserve_one", "", "pgadmit_reserve_one", "pgadmit_settle_one", "pgadmit_settle_one", "", ""} {
		if ss[i].Function != want {
			t.Errorf("statement %d (%.40q): function %q, want %q", i, ss[i].Query, ss[i].Function, want)
		}
	}
	// The same text in two bodies: no guess.
	funcs["pgadmit_settle"] = funcs["pgadmit_settle_one"]
	ss = []Statement{{Query: "UPDATE gateway_rate_limit_counters AS c SET reserved_value = c.reserved_value - v_released, used_value = c.used_value + v_used WHERE c.scope_type = v_scope_type"}}
	Attribute(ss, funcs)
	if ss[0].Function != "" {
		t.Errorf("a statement in two bodies was attributed to %q", ss[0].Function)
	}
}
