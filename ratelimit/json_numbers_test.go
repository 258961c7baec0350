package ratelimit

import (
	"strings"
	"testing"
)

// TestNumericFitsBoundaries: the limits of PostgreSQL's numeric, which
// jsonb stores numbers as, on both sides of each. Every literal here was
// checked against the server ('...'::jsonb).
func TestNumericFitsBoundaries(t *testing.T) {
	for _, tc := range []struct {
		n    string
		fits bool
	}{
		// Plain numbers.
		{"0", true},
		{"-0", true},
		{"12.5", true},
		{"-3.25e+2", true},
		// Digits before the point: at most 131072, those the exponent adds
		// included, leading zeros not.
		{"1e131071", true},
		{"1E131071", true},
		{"1e+131071", true},
		{"-1e131071", true},
		{"9.9e131071", true},
		{"1e131072", false},
		{"-1e131072", false},
		{"10e131071", false},
		{"0.1e131072", true},
		{"0.1e131073", false},
		{"0.0001e131075", true},
		{"0.0001e131076", false},
		{"1e0000000000000000000000000131071", true},
		{"1e0000000000000000000000000131072", false},
		{strings.Repeat("1", 131072), true},
		{strings.Repeat("1", 131073), false},
		// Digits after the point: at most 16383, the literal's fraction
		// digits (trailing zeros too) minus its exponent.
		{"1e-16383", true},
		{"1e-16384", false},
		{"0.1e-16382", true},
		{"0.1e-16383", false},
		{"1.5e-16382", true},
		{"1.50e-16382", false},
		{"100e-16383", true},
		{"100e-16385", false},
		{"10e-16384", false},
		{"0e-16383", true},
		{"-0e-16383", true},
		{"0e-16384", false},
		{"0.0e-16382", true},
		{"0.0e-16383", false},
		{"-0.0e-16383", false},
		{"0." + strings.Repeat("1", 16383), true},
		{"0." + strings.Repeat("1", 16384), false},
		{"0." + strings.Repeat("0", 16384), false},
		{"0." + strings.Repeat("0", 16384) + "e1", true},
		{"0." + strings.Repeat("0", 16383) + "1e131071", true},
		// The exponent: below math.MaxInt32/2 in magnitude, even for zero.
		{"0e1073741822", true},
		{"0e+1073741822", true},
		{"0e01073741822", true},
		{"0.0000e131072", true},
		{"0e1073741823", false},
		{"0e1073741824", false},
		{"0e9999999999999", false},
		{"0e99999999999999999999999999", false},
		{"0e-1073741822", false},
		{"1e2147483647", false},
	} {
		if got := numericFits([]byte(tc.n)); got != tc.fits {
			t.Errorf("numericFits(%.40s) = %v, want %v", tc.n, got, tc.fits)
		}
	}
}

// TestJSONBNumberProblemFindsNumbersOutsideStrings: every number literal
// is checked, wherever it is, and text in strings (keys too) is not, however
// it is escaped.
func TestJSONBNumberProblemFindsNumbersOutsideStrings(t *testing.T) {
	for _, tc := range []struct {
		doc     string
		refused bool
	}{
		{`1e200000`, true},
		{`{"n":1e200000}`, true},
		{`[1e-20000]`, true},
		{`100e-16385`, true},
		{`[1, 2.5, -3e2, {"a": [true, null, 1e131072]}]`, true},
		{`{"a":"x","b":0e1073741823}`, true},
		{` [ 1 , -1e131072 ] `, true},
		{`{"1e200000":"1e-20000"}`, false},
		{`["\"1e200000", "\\", 1e131071]`, false},
		{`["\\\"", 1e-16383, "\u0022 1e200000"]`, false},
		{`[true, false, null, "", {}, []]`, false},
		{`{"n":1e131071,"m":-1e-16383}`, false},
	} {
		got := jsonbNumberProblem([]byte(tc.doc))
		if (got != "") != tc.refused {
			t.Errorf("jsonbNumberProblem(%s) = %q, want refused %v", tc.doc, got, tc.refused)
		}
	}
}

// TestValidateJSONDoesNotAllocateForNumbers: the number check is one pass
// over the bytes, however large the document.
func TestValidateJSONDoesNotAllocateForNumbers(t *testing.T) {
	doc := []byte(`{"prompt":"` + strings.Repeat(`a \"quoted\" 1e999999 text `, 2000) + `","n":[` +
		strings.Repeat(`1.5e10, -0.25, 42, `, 2000) + `0]}`)
	if got := jsonbNumberProblem(doc); got != "" {
		t.Fatalf("jsonbNumberProblem refused a valid document: %s", got)
	}
	if allocs := testing.AllocsPerRun(10, func() { _ = jsonbNumberProblem(doc) }); allocs != 0 {
		t.Fatalf("jsonbNumberProblem allocated %v times per call", allocs)
	}
}

// TestNumericTextLen: how long jsonb gives each number back, as the server
// wrote it (length('...'::jsonb::text), checked against PostgreSQL 15).
func TestNumericTextLen(t *testing.T) {
	for _, tc := range []struct {
		n    string
		want int
	}{
		{"0", 1},
		{"-0", 1},
		{"12.5", 4},
		{"-3.25e+2", 4},
		{"1E2", 3},
		{"1e3", 4},
		{"-0.5", 4},
		{"1.50", 4},
		{"0.00e1", 3},
		{"-0.0001e2", 5},
		{"123.456e1", 7},
		{"5e-1", 3},
		{"1e131071", 131072},
		{"-1e131071", 131073},
		{"9.9e131071", 131072},
		{"0.1e131072", 131072},
		{"0.0001e131075", 131072},
		{"1e-16383", 16385},
		{"0.1e-16382", 16385},
		{"100e-16383", 16385},
		{"0e-16383", 16385},
		{"-0e-16383", 16385},
		{"0.0e-16382", 16385},
		{"0e1073741822", 1},
	} {
		if got := numericTextLen([]byte(tc.n)); got != tc.want {
			t.Errorf("numericTextLen(%s) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestJSONBNumberProblemBoundsTheDocumentAsWrittenBack: a document is
// refused once jsonb would give it back longer than MaxPayloadBytes, its
// numbers written out in full, however short it is as sent.
func TestJSONBNumberProblemBoundsTheDocumentAsWrittenBack(t *testing.T) {
	doc := func(n int) []byte { return []byte("[" + strings.Repeat("1e131071,", n) + "0]") } // 131072 bytes each
	fits := MaxPayloadBytes / 131072                                                         // 128: just over, with the brackets
	if got := jsonbNumberProblem(doc(fits - 1)); got != "" {
		t.Errorf("%d numbers of 131072 digits: refused (%s), want accepted", fits-1, got)
	}
	if got := jsonbNumberProblem(doc(fits)); got == "" {
		t.Errorf("%d numbers of 131072 digits: accepted, want refused", fits)
	}
	if got := jsonbNumberProblem([]byte("[" + strings.Repeat("1e-16383,", 1100) + "0]")); got == "" {
		t.Errorf("1100 numbers of 16385 characters: accepted, want refused")
	}
}
