package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// inspectJSONDoc is inspect --json's document as a script reads it: amounts as json.Number, so
// that their every digit is compared.
type inspectJSONDoc struct {
	SchemaVersion   *int64  `json:"schema_version"`
	DurationSeconds float64 `json:"duration_s"`
	Scope           *struct {
		Type string `json:"type"`
		Key  string `json:"key"`
	} `json:"scope"`
	Limit   int `json:"limit"`
	Windows []struct {
		ScopeType      string      `json:"scope_type"`
		ScopeKey       string      `json:"scope_key"`
		Metric         string      `json:"metric"`
		WindowSeconds  int64       `json:"window_s"`
		WindowStart    time.Time   `json:"window_start"`
		ResetAt        time.Time   `json:"reset_at"`
		Used           json.Number `json:"used"`
		Reserved       json.Number `json:"reserved"`
		Limit          json.Number `json:"limit"`
		Free           json.Number `json:"free"`
		ResetInSeconds float64     `json:"reset_in_s"`
	} `json:"windows"`
	Leases []struct {
		ScopeType           string      `json:"scope_type"`
		ScopeKey            string      `json:"scope_key"`
		LiveLeases          int64       `json:"live_leases"`
		LiveSlots           json.Number `json:"live_slots"`
		ExpiredLeases       int64       `json:"expired_leases"`
		Limit               json.Number `json:"limit"`
		NextExpiryInSeconds *float64    `json:"next_expiry_in_s"`
	} `json:"leases"`
	Admissions []struct {
		ScopeType        string      `json:"scope_type"`
		ScopeKey         string      `json:"scope_key"`
		Admitted         int64       `json:"admitted"`
		Limit            json.Number `json:"limit"`
		Queued           int64       `json:"queued"`
		Running          int64       `json:"running"`
		Finished         int64       `json:"finished"`
		OldestAgeSeconds float64     `json:"oldest_age_s"`
	} `json:"admissions"`
	Allotments []struct {
		ScopeType          string      `json:"scope_type"`
		ScopeKey           string      `json:"scope_key"`
		Metric             string      `json:"metric"`
		WindowSeconds      int64       `json:"window_s"`
		Holder             string      `json:"holder"`
		Blocks             int64       `json:"blocks"`
		Granted            json.Number `json:"granted"`
		Admitted           json.Number `json:"admitted"`
		ReportedAgoSeconds float64     `json:"reported_ago_s"`
		EndsInSeconds      float64     `json:"ends_in_s"`
	} `json:"allotments"`
	Totals struct {
		Windows    int64 `json:"windows"`
		Leases     int64 `json:"leases"`
		Admissions int64 `json:"admissions"`
		Allotments int64 `json:"allotments"`
	} `json:"totals"`
}

// inspectJSON runs inspect with args and --json -, and decodes its document.
func inspectJSON(t *testing.T, args ...string) inspectJSONDoc {
	t.Helper()
	out, errOut, code := cli(t, nil, append(args, "--json", "-")...)
	if code != exitOK {
		t.Fatalf("inspect %s --json -: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	var doc inspectJSONDoc
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Fatalf("inspect --json -: not one document: %v\n%s", err, out)
	}
	if doc.Windows == nil || doc.Leases == nil || doc.Admissions == nil || doc.Allotments == nil {
		t.Errorf("inspect --json: a table is null, not []:\n%s", out)
	}
	return doc
}

// inspect --json writes the four tables as arrays of objects, with numbers where the text shows
// formatted cells: each field is checked against what the test set up, under a few
// reservations, a lease, two queued tasks and a Local block; --scope narrows every table, --limit
// the rows (totals say how many there are); with a file, the text stays on stdout as without
// --json.
func TestInspectJSON(t *testing.T) {
	t.Parallel()
	url, pool := newDatabase(t)
	win := readBackWindow(t, pool)
	inspectScene(t, pool, win, 500.25)
	winS := int64(win / time.Second)
	left := func(what string, s float64) { // what is left of a current window
		t.Helper()
		if s <= 0 || s > win.Seconds() {
			t.Errorf("inspect --json: %s %g, want in (0, %g]", what, s, win.Seconds())
		}
	}

	doc := inspectJSON(t, "--database-url", url, "inspect")
	if doc.SchemaVersion == nil || *doc.SchemaVersion != latestSchemaVersion(t) || doc.Scope != nil || doc.Limit != 50 || doc.DurationSeconds <= 0 {
		t.Errorf("inspect --json: schema_version %v, scope %v, limit %d, duration_s %g; want %d, null, 50, > 0",
			doc.SchemaVersion, doc.Scope, doc.Limit, doc.DurationSeconds, latestSchemaVersion(t))
	}
	if doc.Totals.Windows != 4 || doc.Totals.Leases != 1 || doc.Totals.Admissions != 1 || doc.Totals.Allotments != 1 {
		t.Errorf("inspect --json: totals %+v, want 4 windows and 1 of the rest", doc.Totals)
	}
	type window struct{ scope, metric, used, reserved, limit, free string }
	var windows []window
	for _, w := range doc.Windows {
		windows = append(windows, window{w.ScopeType + ":" + w.ScopeKey, w.Metric, w.Used.String(), w.Reserved.String(), w.Limit.String(), w.Free.String()})
		if w.WindowSeconds != winS || !w.ResetAt.Equal(w.WindowStart.Add(win)) {
			t.Errorf("inspect --json: window %+v, want window_s %d and reset_at window_start + the window", w, winS)
		}
		left("reset_in_s", w.ResetInSeconds)
		if till := time.Until(w.ResetAt).Seconds(); w.ResetInSeconds < till-5 || w.ResetInSeconds > till+5 {
			t.Errorf("inspect --json: reset_in_s %g, reset_at %s is %gs from now", w.ResetInSeconds, w.ResetAt, till)
		}
	}
	want := []window{ // in inspect's order: scope, metric
		{"api_key:other", "requests", "0", "2", "5", "3"},
		{"api_key:team-42", "requests", "0", "1", "100", "99"},
		{"api_key:team-42", "tokens", "0", "500.25", "10000", "9499.75"},
		{"provider:gpt", "tokens", "0", "1600", "160000", "158400"}, // the block: 16 requests' worth
	}
	if len(windows) != len(want) {
		t.Fatalf("inspect --json: windows %+v, want %+v", windows, want)
	}
	for i := range want {
		if windows[i] != want[i] {
			t.Errorf("inspect --json: window %+v, want %+v", windows[i], want[i])
		}
	}
	if len(doc.Leases) != 1 {
		t.Fatalf("inspect --json: leases %+v, want one", doc.Leases)
	}
	if l := doc.Leases[0]; l.ScopeType != "model" || l.ScopeKey != "large" || l.LiveLeases != 1 || l.LiveSlots != "1" || l.ExpiredLeases != 0 ||
		l.Limit != "8" || l.NextExpiryInSeconds == nil || *l.NextExpiryInSeconds <= 0 || *l.NextExpiryInSeconds > ratelimit.DefaultLeaseTTL.Seconds() {
		t.Errorf("inspect --json: lease %+v, want model:large, 1 live of 1 slot, 0 expired, limit 8, next expiry in (0, %s]", l, ratelimit.DefaultLeaseTTL)
	}
	if len(doc.Admissions) != 1 {
		t.Fatalf("inspect --json: admissions %+v, want one", doc.Admissions)
	}
	if a := doc.Admissions[0]; a.ScopeType != "queue" || a.ScopeKey != "team-42" || a.Admitted != 2 || a.Limit != "5" || a.Queued != 2 ||
		a.Running != 0 || a.Finished != 0 || a.OldestAgeSeconds < 0 || a.OldestAgeSeconds > 60 {
		t.Errorf("inspect --json: admission %+v, want queue:team-42, 2 admitted of 5, 2 queued, oldest_age_s in [0, 60]", a)
	}
	if len(doc.Allotments) != 1 {
		t.Fatalf("inspect --json: allotments %+v, want one", doc.Allotments)
	}
	a := doc.Allotments[0]
	if a.ScopeType != "provider" || a.ScopeKey != "gpt" || a.Metric != "tokens" || a.WindowSeconds != winS || a.Holder != "gw-1" || a.Blocks != 1 ||
		a.Granted != "1600" || a.Admitted != "100" || a.ReportedAgoSeconds < 0 || a.ReportedAgoSeconds > 60 {
		t.Errorf("inspect --json: allotment %+v, want provider:gpt tokens, window_s %d, gw-1's 1 block of 1600, 100 admitted, reported_ago_s in [0, 60]", a, winS)
	}
	left("ends_in_s", a.EndsInSeconds)

	doc = inspectJSON(t, "--database-url", url, "inspect", "--scope", "api_key:team-42")
	if doc.Scope == nil || doc.Scope.Type != "api_key" || doc.Scope.Key != "team-42" || len(doc.Windows) != 2 || doc.Totals.Windows != 2 ||
		len(doc.Leases)+len(doc.Admissions)+len(doc.Allotments) != 0 || doc.Totals.Leases+doc.Totals.Admissions+doc.Totals.Allotments != 0 {
		t.Errorf("inspect --scope api_key:team-42 --json: %+v, want its two windows alone", doc)
	}
	for _, w := range doc.Windows {
		if w.ScopeType != "api_key" || w.ScopeKey != "team-42" {
			t.Errorf("inspect --scope api_key:team-42 --json: window of %s:%s", w.ScopeType, w.ScopeKey)
		}
	}
	doc = inspectJSON(t, "--database-url", url, "inspect", "--limit", "1")
	if len(doc.Windows) != 1 || doc.Totals.Windows != 4 || doc.Limit != 1 {
		t.Errorf("inspect --limit 1 --json: %d windows of %d, limit %d; want 1 of 4, limit 1", len(doc.Windows), doc.Totals.Windows, doc.Limit)
	}

	// With a file, stdout holds the text as without --json (the clock moves between the two
	// runs: the cells of time left may differ, and are masked).
	path := filepath.Join(t.TempDir(), "inspect.json")
	withFile, errOut, code := cli(t, nil, "--database-url", url, "inspect", "--json", path)
	if code != exitOK || errOut != "" {
		t.Fatalf("inspect --json FILE: exit %d\n%s", code, errOut)
	}
	text := cliOK(t, "--database-url", url, "inspect")
	times := regexp.MustCompile(`\b(\d+m\d+s|\d+m|\d+s)\b`)
	if masked := func(s string) string { return times.ReplaceAllString(s, "T") }; masked(withFile) != masked(text) || !strings.Contains(withFile, "model:large") {
		t.Errorf("inspect --json FILE changed the text:\n%s\nwant\n%s", withFile, text)
	}
	if b, err := os.ReadFile(path); err != nil || !json.Valid(b) || !strings.Contains(string(b), `"scope_key": "large"`) {
		t.Errorf("inspect --json FILE: %v\n%s", err, b)
	}
}
