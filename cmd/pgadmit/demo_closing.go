package main

import (
	"bytes"
	"context"
	"io"
)

// closingReport prints on out what report writes to the writer it is given (a demo's summary, its
// checks and their verdict), unless ctx ends first (Ctrl-C, SIGTERM) or meanwhile: then it prints
// nothing and returns ctx's error, which the CLI says as "interrupted". (An interrupted
// bench reports the workloads that finished: each of those is whole.) The report of a run cut short, or read while its statements were being
// cancelled, would look like a finished run's.
func closingReport(ctx context.Context, out io.Writer, report func(io.Writer) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf bytes.Buffer
	err := report(&buf)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, werr := buf.WriteTo(out); werr != nil && err == nil {
		return werr
	}
	return err
}
