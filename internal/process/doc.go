// Package process holds what the throwaway servers (packages pgcluster and pgbouncer) and the
// test helpers (package pgtest) do with processes that differs between Unix and other systems:
// start a child in a process group of its own, as another user, end that group, tell whether a
// pid is gone, signal a process that is no child, and raise a signal at this process.
//
// On Unix each helper is the system call it replaces. Elsewhere (Windows) there are no process
// groups and no signals to send: a helper acts on the process alone (Process.Kill), says so in
// its comment, and running a child as another user fails with errors.ErrUnsupported. Only the
// Unix side runs in CI; the rest is compiled there (make cross), not run.
package process
