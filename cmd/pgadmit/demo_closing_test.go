package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

// closingReport prints a report that ran to its end, with its error (a demo's problems, exit 1);
// one that an interrupt came before or during prints nothing, and its error is the context's,
// which the CLI says as "interrupted".
func TestClosingReportPrintsNothingOnceInterrupted(t *testing.T) {
	t.Parallel()
	problems := &exitError{code: exitFailure, msg: "1 problem, see above"}
	var out bytes.Buffer
	err := closingReport(context.Background(), &out, func(w io.Writer) error {
		_, _ = io.WriteString(w, "SUMMARY\nPROBLEM: x\n")
		return problems
	})
	if err != problems || out.String() != "SUMMARY\nPROBLEM: x\n" {
		t.Errorf("a report that ran to its end: %v, printed %q; want its error and what it wrote", err, out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	out.Reset()
	err = closingReport(ctx, &out, func(w io.Writer) error {
		_, _ = io.WriteString(w, "SUMMARY\n")
		cancel() // the interrupt, while the report reads what it prints
		return nil
	})
	if !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Errorf("a report interrupted as it ran: %v, printed %q; want context.Canceled and nothing", err, out.String())
	}

	ran := false
	err = closingReport(ctx, &out, func(io.Writer) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran || out.Len() != 0 {
		t.Errorf("a report after the interrupt: %v, ran %t, printed %q; want context.Canceled, not run", err, ran, out.String())
	}
}
