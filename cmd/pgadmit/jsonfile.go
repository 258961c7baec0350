package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
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
//
// A path that is a regular file, or none yet, is replaced whole once the report is written: the
// document goes to a temporary file beside it, renamed over the path, so a reader never sees an
// emptied or half-written report, and a run that fails, its write too (a full disk), leaves none.
// A symlink to a report (report.json -> reports/today.json), or to none yet, is kept and the
// report it leads to replaced so. Anything else (a device, a pipe, a socket, or the process's own
// stdout or stderr, which /dev/stdout leads to, or which names itself in
// `doctor --json log >> log`) is a stream the shell or the user set up: it is
// opened with O_APPEND, never truncated, replaced nor removed. O_APPEND because /dev/stdout
// reopens the shell's file as a new description at offset 0: without it the document overwrote
// the start of `>> log`, or of the text doctor has just printed to `> out`.
type jsonFile struct {
	path string   // the report to replace (a symlink's target), or the stream
	file *os.File // the temporary file, or the stream; nil for stdout
	// replace: file is a temporary file, renamed over path once written; abandon removes it,
	// and earlier, the report path held when the run began (nil: none), if it still does.
	replace bool
	earlier fs.FileInfo
	written bool
}

// createJSONFile opens --json's file before anything else runs (as bench's --cpuprofile is),
// so that a bad path fails the command at once, not after every workload has run or the books
// were checked; nil when path is empty. A regular file at path (an earlier run's report) is left
// as it is until the report is written (jsonFile).
func createJSONFile(path string) (*jsonFile, error) {
	return openJSONFile(path, os.Stdout, os.Stderr)
}

// openJSONFile is createJSONFile with the process's standard files given (std), which a test
// replaces with files of its own.
func openJSONFile(path string, std ...*os.File) (*jsonFile, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &jsonFile{}, nil
	}
	target, earlier, stream, err := reportTarget(path, std)
	j := &jsonFile{path: target, replace: !stream, earlier: earlier}
	var f *os.File
	if err == nil && stream {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	} else if err == nil {
		f, err = createTemp(target)
	}
	if err != nil {
		return nil, usagef("--json: %v", err)
	}
	j.file = f
	return j, nil
}

// reportTarget tells what --json's path leads to: a stream to write at its end (a device, a
// pipe, a socket, or the process's own stdout or stderr, std, as /dev/stdout is in `>> log`,
// or as log itself is in `doctor --json log >> log`),
// or a report to replace: the regular file at path, or the one a symlink at path leads to
// (report.json -> reports/today.json), which may not exist yet. earlier is that report as the
// run found it, nil when there is none yet.
func reportTarget(path string, std []*os.File) (target string, earlier fs.FileInfo, stream bool, err error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return path, nil, false, nil
	case err != nil:
		return "", nil, false, err
	case st.Mode().IsRegular() && !sameAsOneOf(st, std):
		return path, st, false, nil
	case st.Mode()&fs.ModeSymlink == 0:
		return path, nil, true, nil
	}
	st, err = os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		st = nil // a symlink to a report that a failed run removed, or that none wrote yet
	case err != nil:
		return "", nil, false, err
	case !st.Mode().IsRegular() || sameAsOneOf(st, std):
		return path, nil, true, nil
	}
	target, err = linkTarget(path)
	return target, st, false, err
}

// sameAsOneOf reports whether st is the file of one of files.
func sameAsOneOf(st fs.FileInfo, files []*os.File) bool {
	for _, f := range files {
		if fst, err := f.Stat(); err == nil && os.SameFile(st, fst) {
			return true
		}
	}
	return false
}

// linkTarget follows the symlink at path, and any it leads to, to the path of the file at its
// end, which may not exist (filepath.EvalSymlinks fails then).
func linkTarget(path string) (string, error) {
	for range 255 {
		st, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || err == nil && st.Mode()&fs.ModeSymlink == 0 {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			// Relative to the symlink's directory, resolved first: a ".." in link then leaves
			// the directory the symlink is really in, as the system's lookup does.
			dir, err := filepath.EvalSymlinks(filepath.Dir(path))
			if err != nil {
				return "", err
			}
			link = filepath.Join(dir, link)
		}
		path = link
	}
	return "", &fs.PathError{Op: "open", Path: path, Err: errors.New("too many levels of symbolic links")}
}

// createTemp creates a hidden file beside path to be renamed over it, mode 0666 less the umask
// as a new report always had (os.CreateTemp's is 0600). Its error names path, not the
// temporary file the user never named.
func createTemp(path string) (*os.File, error) {
	dir, base := filepath.Split(path)
	for {
		name := filepath.Join(dir, fmt.Sprintf(".%s.%08x.tmp", base, rand.Uint32()))
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		var perr *fs.PathError
		if errors.As(err, &perr) {
			perr.Path = path
		}
		return f, err
	}
}

// write writes v as indented JSON to the file, or to stdout, and closes the file; nothing
// when --json was not given (j nil). When it fails, abandon removes what it left.
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
	if err := j.finish(b); err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	j.written = true
	return nil
}

// finish writes b to the file and closes it; a temporary file is synced first (a crash after
// the rename leaves the whole report, not an empty file) and renamed over the path.
func (j *jsonFile) finish(b []byte) error {
	_, err := j.file.Write(b)
	if err == nil && j.replace {
		err = j.file.Sync()
	}
	if cerr := j.file.Close(); err == nil {
		err = cerr
	}
	if err == nil && j.replace {
		err = os.Rename(j.file.Name(), j.path)
	}
	return err
}

// abandon closes the file when the run ended before its report was written (or its write
// failed), and, for a report to replace, removes the temporary file and the report its path
// held when the run began: an earlier run's, which a script reading it after this failure would
// take for this run's. A report that another run on the same path wrote since is left. A stream
// is left as it is.
func (j *jsonFile) abandon() {
	if j == nil || j.file == nil || j.written {
		return
	}
	j.file.Close()
	if j.replace {
		os.Remove(j.file.Name())
		if st, err := os.Lstat(j.path); err == nil && j.earlier != nil && sameReport(st, j.earlier) {
			os.Remove(j.path)
		}
	}
}

// sameReport reports whether st is still the report a run found, earlier: the same file (a run
// that wrote since renamed a new one over it), not written to since, as a new file that reused
// its inode number would have been.
func sameReport(st, earlier fs.FileInfo) bool {
	return os.SameFile(st, earlier) && st.ModTime().Equal(earlier.ModTime())
}

// textOut is where the command's text goes: stderr when the JSON document goes to stdout
// (--json -), else stdout.
func (j *jsonFile) textOut(stdout, stderr io.Writer) io.Writer {
	if j != nil && j.file == nil {
		return stderr
	}
	return stdout
}
