package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
)

// jsonFlag adds doctor's and inspect's --json, which writes what (their "report", "tables") as
// JSON, as bench's --json writes its results.
func jsonFlag(flags *flag.FlagSet, what string) *string {
	return flags.String("json", "", "also write the "+what+" as JSON to this `file` (- for stdout; the text then goes to stderr); none when the run cannot end (an error, a cut-off, an interrupt)")
}

// openJSONFlag refuses a --json given empty (a script's unset variable: no file would be
// written), then opens its file (createJSONFile); nil when it was not given.
func openJSONFlag(flags *flag.FlagSet, path string) (*jsonFile, error) {
	if flagGiven(flags, "json") && strings.TrimSpace(path) == "" {
		return nil, usagef("--json is empty")
	}
	return createJSONFile(path)
}

// jsonFile is the --json file of bench, doctor or inspect, or stdout for "-".
type jsonFile struct {
	file *os.File // nil for stdout
	// regular: the path names a regular file (one this run created, or an earlier run's report),
	// which abandon removes; not a device, a pipe or a symlink (/dev/stdout), left as they are.
	regular bool
	written bool
}

// createJSONFile opens --json's file before anything else runs (as bench's --cpuprofile is),
// so that a bad path fails the command at once, not after every workload has run or the books
// were checked; nil when path is empty. A file that exists already (an earlier run's report, or /dev/stdout) is opened
// without being truncated: it is replaced when the report is written, and an earlier report is
// removed when the run fails (abandon).
func createJSONFile(path string) (*jsonFile, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &jsonFile{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, usagef("--json: %v", err)
	}
	st, err := os.Lstat(path)
	return &jsonFile{file: f, regular: err == nil && st.Mode().IsRegular()}, nil
}

// write writes v as indented JSON to the file, or to stdout, and closes the file; nothing
// when --json was not given (j nil).
func (j *jsonFile) write(stdout io.Writer, v any) error {
	if j == nil {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	b = append(b, '\n')
	if j.file == nil {
		_, err := stdout.Write(b)
		return err
	}
	j.written = true
	// An earlier report in the file: drop it (a device or pipe has nothing to drop).
	if st, serr := j.file.Stat(); serr == nil && st.Mode().IsRegular() {
		err = j.file.Truncate(0)
	}
	if err == nil {
		_, err = j.file.Write(b)
	}
	if cerr := j.file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	return nil
}

// abandon closes the file when the run ended before its report was written, and removes it
// when it is a regular file: one this run created (an empty file is no JSON document), or an
// earlier run's report, which a script reading the file after this failure would take for this
// run's. A device, pipe or symlink (/dev/stdout) is left as it is.
func (j *jsonFile) abandon() {
	if j == nil || j.file == nil || j.written {
		return
	}
	j.file.Close()
	if j.regular {
		os.Remove(j.file.Name())
	}
}

// textOut is where the command's text goes: stderr when the JSON document goes to stdout
// (--json -), else stdout.
func (j *jsonFile) textOut(stdout, stderr io.Writer) io.Writer {
	if j != nil && j.file == nil {
		return stderr
	}
	return stdout
}
