package main

import (
	"encoding/json"
	"time"

	"github.com/pgadmit/pgadmit/db"
)

// inspectReport is inspect's --json document: the four tables as arrays of objects, with the
// numbers the text formats (amounts as JSON numbers with every digit numeric holds, durations
// in seconds). It is written only once all four were read, as the text is: a run that failed,
// was cut off or interrupted writes none. Every field is always there (none is left out).
type inspectReport struct {
	// SchemaVersion is the database's pgadmit schema version, null when it could not be read.
	SchemaVersion *int64 `json:"schema_version"`
	// DurationSeconds is how long the run took, connecting included.
	DurationSeconds float64 `json:"duration_s"`
	// Scope is --scope, null when not given.
	Scope *inspectScopeJSON `json:"scope"`
	// Limit is --limit: the most rows each table holds.
	Limit int `json:"limit"`
	// The tables ([] when empty), in the text's order.
	Windows    []inspectWindowJSON    `json:"windows"`
	Leases     []inspectLeaseJSON     `json:"leases"`
	Admissions []inspectAdmissionJSON `json:"admissions"`
	Allotments []inspectAllotmentJSON `json:"allotments"`
	// Totals counts each table's rows, those past --limit too (the text's "N of M shown").
	Totals inspectTotalsJSON `json:"totals"`
}

type inspectScopeJSON struct {
	Type string `json:"type"`
	Key  string `json:"key"`
}

type inspectTotalsJSON struct {
	Windows    int64 `json:"windows"`
	Leases     int64 `json:"leases"`
	Admissions int64 `json:"admissions"`
	Allotments int64 `json:"allotments"`
}

// inspectWindowJSON is a row of WINDOWS.
type inspectWindowJSON struct {
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
}

// inspectLeaseJSON is a row of CONCURRENCY LEASES.
type inspectLeaseJSON struct {
	ScopeType     string      `json:"scope_type"`
	ScopeKey      string      `json:"scope_key"`
	LiveLeases    int64       `json:"live_leases"`
	LiveSlots     json.Number `json:"live_slots"`
	ExpiredLeases int64       `json:"expired_leases"`
	Limit         json.Number `json:"limit"`
	// NextExpiryInSeconds is null when no lease is live (the text's "-").
	NextExpiryInSeconds *float64 `json:"next_expiry_in_s"`
}

// inspectAdmissionJSON is a row of QUEUE ADMISSIONS.
type inspectAdmissionJSON struct {
	ScopeType        string      `json:"scope_type"`
	ScopeKey         string      `json:"scope_key"`
	Admitted         int64       `json:"admitted"`
	Limit            json.Number `json:"limit"`
	Queued           int64       `json:"queued"`
	Running          int64       `json:"running"`
	Finished         int64       `json:"finished"`
	OldestAgeSeconds float64     `json:"oldest_age_s"`
}

// inspectAllotmentJSON is a row of ALLOTMENTS.
type inspectAllotmentJSON struct {
	ScopeType     string      `json:"scope_type"`
	ScopeKey      string      `json:"scope_key"`
	Metric        string      `json:"metric"`
	WindowSeconds int64       `json:"window_s"`
	Holder        string      `json:"holder"`
	Blocks        int64       `json:"blocks"`
	Granted       json.Number `json:"granted"`
	// Admitted is what the holder last reported admitting from its blocks (ADMITTED).
	Admitted           json.Number `json:"admitted"`
	ReportedAgoSeconds float64     `json:"reported_ago_s"`
	// EndsInSeconds is negative when the window ended and the blocks were not returned.
	EndsInSeconds float64 `json:"ends_in_s"`
}

// inspectDocument builds the document of what inspect read.
func inspectDocument(in inspection) inspectReport {
	rep := inspectReport{Windows: []inspectWindowJSON{}, Leases: []inspectLeaseJSON{}, Admissions: []inspectAdmissionJSON{},
		Allotments: []inspectAllotmentJSON{}}
	rep.Totals = inspectTotalsJSON{
		Windows:    total(in.windows, func(r db.InspectWindowsRow) int64 { return r.TotalRows }),
		Leases:     total(in.leases, func(r db.InspectLeasesRow) int64 { return r.TotalRows }),
		Admissions: total(in.admissions, func(r db.InspectAdmissionsRow) int64 { return r.TotalRows }),
		Allotments: total(in.allotments, func(r db.InspectAllotmentsRow) int64 { return r.TotalRows }),
	}
	for _, r := range in.windows {
		rep.Windows = append(rep.Windows, inspectWindowJSON{ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Metric: r.Metric,
			WindowSeconds: int64(r.WindowSeconds), WindowStart: r.WindowStart.UTC(), ResetAt: r.ResetAt.UTC(), Used: json.Number(r.UsedValue),
			Reserved: json.Number(r.ReservedValue), Limit: json.Number(r.LimitValue), Free: json.Number(r.FreeValue), ResetInSeconds: r.ResetInSeconds})
	}
	for _, r := range in.leases {
		l := inspectLeaseJSON{ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, LiveLeases: r.LiveLeases, LiveSlots: json.Number(r.LiveValue),
			ExpiredLeases: r.ExpiredLeases, Limit: json.Number(r.LimitValue)}
		if r.LiveLeases > 0 {
			next := r.NextExpiryInSeconds
			l.NextExpiryInSeconds = &next
		}
		rep.Leases = append(rep.Leases, l)
	}
	for _, r := range in.admissions {
		rep.Admissions = append(rep.Admissions, inspectAdmissionJSON{ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Admitted: r.Admitted,
			Limit: json.Number(r.LimitValue), Queued: r.Queued, Running: r.Running, Finished: r.Finished, OldestAgeSeconds: r.OldestAgeSeconds})
	}
	for _, r := range in.allotments {
		rep.Allotments = append(rep.Allotments, inspectAllotmentJSON{ScopeType: r.ScopeType, ScopeKey: r.ScopeKey, Metric: r.Metric,
			WindowSeconds: int64(r.WindowSeconds), Holder: r.Holder, Blocks: r.Blocks, Granted: json.Number(r.Granted), Admitted: json.Number(r.Consumed),
			ReportedAgoSeconds: r.ReportedAgoSeconds, EndsInSeconds: r.EndsInSeconds})
	}
	return rep
}
