package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/internal/textcell"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Exit codes, documented in the CLI reference, docs/cli.md.
const (
	exitOK      = 0 // success
	exitFailure = 1 // the command failed: database error, doctor problems, bench checks off
	exitUsage   = 2 // bad command line: unknown command or flag, bad value, no database given
)

// defaultConnectTimeout bounds how long connecting to an unreachable database takes.
const defaultConnectTimeout = 5 * time.Second

// app is one invocation of pgadmit: its output streams, environment and global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	dsn            string        // --database-url, else $DATABASE_URL; "" when neither is set
	connectTimeout time.Duration // --connect-timeout
	// connectTimeoutGiven: --connect-timeout was on the command line; else a
	// connect_timeout in the database URL wins over its default.
	connectTimeoutGiven bool

	// migrateProgressEvery is how often migrate up and down say what a long step waits for.
	migrateProgressEvery time.Duration
	// migrated, when not nil, is called as each migration of migrate up or down completes, with
	// its file: a test's hook (an interrupt at that point).
	migrated func(source string)

	// cmd is the command being run, for messages.
	cmd *command

	// schemaBehind, when not "", says that the database lacks migrations of this pgadmit
	// (connectOperator): run warns with it unless the command failed for that very reason.
	schemaBehind string
	// schemaVersion is the database's pgadmit schema version as connectOperator read it, nil when
	// it could not: doctor's and inspect's --json say it.
	schemaVersion *int64
}

// command is a subcommand of pgadmit.
type command struct {
	name    string
	args    string // synopsis of what follows the name, e.g. "[flags] up|down|status|version"
	summary string // one line, for the command list
	help    string // what it does, shown by --help
	// db says whether the command needs a database: dbRequired fails without one, dbOptional
	// starts a throwaway cluster instead, dbNone never connects.
	db  dbNeed
	run func(ctx context.Context, a *app, args []string) error
}

type dbNeed int

const (
	dbNone dbNeed = iota
	dbRequired
	dbOptional
)

// commands lists pgadmit's subcommands, in the order `pgadmit --help` shows them.
func commands() []*command {
	return []*command{
		migrateCommand(),
		recoverCommand(),
		pruneCommand(),
		doctorCommand(),
		inspectCommand(),
		demoCommand(),
		benchCommand(),
	}
}

// usageError is a bad command line; it exits with exitUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// exitError ends a command with a given exit code and message, for outcomes that are not
// errors of pgadmit itself: doctor found problems, a bench check was off.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// errHelp ends a command after it printed its help, with exit code 0.
var errHelp = errors.New("help requested")

// run runs pgadmit with args (without the program name) and returns its exit code. It is main
// without the process: tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runApp(ctx, newApp(stdout, stderr, getenv), args)
}

// newApp is pgadmit writing to stdout and stderr, with its defaults.
func newApp(stdout, stderr io.Writer, getenv func(string) string) *app {
	return &app{stdout: stdout, stderr: stderr, getenv: getenv, connectTimeout: defaultConnectTimeout,
		migrateProgressEvery: migrateProgressEvery}
}

// runApp is run with a made: a test may change a's defaults first.
func runApp(ctx context.Context, a *app, args []string) int {
	stderr := a.stderr
	out := &outputWriter{w: a.stdout}
	a.stdout = out
	err := out.lost(readOnlyAdvice(statementCacheAdvice(a.main(ctx, args))))
	prefix := a.prefix()
	var sbe *schemaBehindError
	if a.schemaBehind != "" && !errors.As(err, &sbe) {
		a.warn("%s", a.schemaBehind)
	}
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	}
	msg := scrubArgs(scrub(err.Error(), a.dsn), args)
	var ue *usageError
	var ee *exitError
	switch {
	case errors.As(err, &ue):
		hint := "pgadmit --help"
		if a.cmd != nil {
			hint = "pgadmit " + a.cmd.name + " --help"
		}
		fmt.Fprintf(stderr, "%s: %s (see %s)\n", prefix, msg, hint)
		return exitUsage
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", prefix, msg)
		}
		return ee.code
	case interrupted(ctx, err):
		fmt.Fprintf(stderr, "%s: interrupted\n", prefix)
		return exitFailure
	default:
		fmt.Fprintf(stderr, "%s: %s\n", prefix, msg)
		return exitFailure
	}
}

// outputWriter is a command's stdout. It remembers the first write that failed, so that a
// command whose output was lost (a full disk, a reader that went away) does not exit 0: a
// script that ran `pgadmit migrate version > v` or `pgadmit doctor >> log` would read success.
type outputWriter struct {
	w   io.Writer
	err error
}

func (o *outputWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil && o.err == nil {
		o.err = err
	}
	return n, err
}

// lost returns err, the command's outcome, unless a write of its output failed and the command
// succeeded (or printed its help) or failed for that very write: then it says that the output
// was lost. A command that failed for another reason keeps its own error.
func (o *outputWriter) lost(err error) error {
	if o.err == nil || (err != nil && !errors.Is(err, errHelp) && !errors.Is(err, o.err)) {
		return err
	}
	return fmt.Errorf("cannot write its output: %w", o.err)
}

// prefix begins each line pgadmit says on stderr: "pgadmit", or "pgadmit demo" once the command
// is known.
func (a *app) prefix() string {
	if a.cmd == nil {
		return "pgadmit"
	}
	return "pgadmit " + a.cmd.name
}

// warn says on stderr, in one line prefixed as the command's errors are ("pgadmit demo:
// warning: ..."), something an operator should know that does not fail the command by itself.
func (a *app) warn(format string, args ...any) {
	fmt.Fprintf(a.stderr, "%s: warning: %s\n", a.prefix(), fmt.Sprintf(format, args...))
}

// warnLeftHeld says that an interrupted bench or demo gave up giving back some of what it held
// once its grace was over (grace.ErrLeftHeld says what frees it).
func (a *app) warnLeftHeld() { a.warn("%v", grace.ErrLeftHeld) }

// interrupted says whether err is how a command ended because ctx was cancelled (Ctrl-C,
// SIGTERM): ctx's own error, or the server's cancellation of the statement in flight (SQLSTATE
// 57014, query_canceled), which is what the pool's cancel-request handler (ratelimit.ConfigurePool)
// makes of an interrupt mid-statement, and what goose reports, wrapped in its partial migration
// error, when a migration is interrupted; or database/sql's driver.ErrBadConn, which goose's
// connection gives, once the cancellation of a statement closed it, to the next statement of a
// migration that runs outside a transaction (CREATE INDEX CONCURRENTLY).
func interrupted(ctx context.Context, err error) bool {
	if ctx.Err() == nil {
		return false
	}
	var pgErr *pgconn.PgError
	return errors.Is(err, context.Canceled) || (errors.As(err, &pgErr) && pgErr.Code == "57014") || errors.Is(err, driver.ErrBadConn)
}

// statementCacheAdvice adds to err, when it is the server refusing one of pgx's cached
// statements (a transaction pooler in front of a connection string in pgx's default exec mode),
// what to change. The statements of migrate and inspect do not go through ratelimit, whose
// errors (a *ratelimit.PoolerError) say it themselves.
func statementCacheAdvice(err error) error {
	var pe *ratelimit.PoolerError
	if errors.As(err, &pe) || !poolerr.StatementCacheLost(err) {
		return err
	}
	return fmt.Errorf("%w: the connection goes through a transaction-pooling proxy, and pgx's default exec mode "+
		"(cache_statement) needs one server session: add default_query_exec_mode=exec to the connection string "+
		"('pgadmit doctor' checks it)", err)
}

// main parses the global flags, picks the command and runs it.
func (a *app) main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pgadmit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.globalFlags(fs)
	help := fs.Bool("help", false, "show this help")
	fs.BoolVar(help, "h", false, "show this help")
	explainDurations(fs)
	if a.dsn == "" {
		a.dsn = a.getenv("DATABASE_URL")
	}
	err := fs.Parse(args)
	a.noteGiven(fs)
	if err != nil {
		return flagError(fs, err)
	}
	rest := fs.Args()
	switch {
	case *help && len(rest) > 0 && rest[0] == "help":
		// pgadmit --help help [...]: help itself, read as `pgadmit help [...]` is.
		*help = false
	case *help && len(rest) > 0:
		// pgadmit --help <command> [...]: that command's help, as `pgadmit help <command>`
		// shows it; what follows the command is not read.
		rest = []string{rest[0], "--help"}
		*help = false
	}
	if *help || (len(rest) > 0 && rest[0] == "help" && len(rest) == 1) {
		a.printUsage(a.stdout, fs)
		return errHelp
	}
	if len(rest) == 0 {
		a.printUsage(a.stderr, fs)
		return &exitError{code: exitUsage}
	}
	name := rest[0]
	if name == "help" { // pgadmit help <command>
		// A --help before or after the command asks for the same help: it is dropped.
		args := slices.DeleteFunc(slices.Clone(rest[1:]), func(arg string) bool {
			return slices.Contains([]string{"-h", "--h", "-help", "--help"}, arg)
		})
		if len(args) > 1 {
			return usagef("unexpected argument %q after help %s", args[1], args[0])
		}
		if len(args) == 0 || args[0] == "help" {
			a.printUsage(a.stdout, fs)
			return errHelp
		}
		name, rest = args[0], []string{args[0], "--help"}
	}
	for _, c := range commands() {
		if c.name == name {
			a.cmd = c
			return c.run(ctx, a, rest[1:])
		}
	}
	return usagef("unknown command %q", name)
}

// dsnValue is the --database-url flag. Its String never shows the value, so that --help cannot
// print a password.
type dsnValue struct{ p *string }

func (v dsnValue) String() string     { return "" }
func (v dsnValue) Set(s string) error { *v.p = s; return nil }

// globalFlags adds the flags every command accepts, before or after its name.
func (a *app) globalFlags(fs *flag.FlagSet) {
	fs.Var(dsnValue{&a.dsn}, "database-url", "PostgreSQL connection `URL` (default $DATABASE_URL)")
	fs.DurationVar(&a.connectTimeout, "connect-timeout", a.connectTimeout, "give up connecting to the database after this `duration`, at least 100ms (when not given, the URL's connect_timeout, if any)")
}

// noteGiven records whether fs's command line set --connect-timeout.
func (a *app) noteGiven(fs *flag.FlagSet) {
	a.connectTimeoutGiven = a.connectTimeoutGiven || flagGiven(fs, "connect-timeout")
}

// flagGiven reports whether fs's command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// flags returns the flag set of command c, with the global flags and --help.
func (a *app) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a.globalFlags(fs)
	return fs
}

// parse parses a command's flags, which may come before, between or after its positional
// arguments (goose-style `migrate down --to 0`), and returns the positional arguments. --help
// prints the command's help to stdout and returns errHelp; a bad flag returns a usage error.
// When the command needs a database and none was given, that is a usage error too.
func (a *app) parse(c *command, fs *flag.FlagSet, args []string) ([]string, error) {
	help := fs.Bool("help", false, "show this help")
	fs.BoolVar(help, "h", false, "show this help")
	explainDurations(fs)
	var positional []string
	for {
		err := fs.Parse(args)
		a.noteGiven(fs)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				a.printCommandHelp(a.stdout, c, fs)
				return nil, errHelp
			}
			return nil, flagError(fs, err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *help {
		a.printCommandHelp(a.stdout, c, fs)
		return nil, errHelp
	}
	if err := checkDuration("connect-timeout", a.connectTimeout); err != nil {
		return nil, err
	}
	if c.db == dbRequired && a.dsn == "" {
		return nil, usagef("no database: set DATABASE_URL or pass --database-url")
	}
	if err := checkScheme(a.dsn); err != nil {
		return nil, err
	}
	return positional, nil
}

// noArgs refuses positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

func (a *app) printUsage(w io.Writer, global *flag.FlagSet) {
	fmt.Fprint(w, `pgadmit operates pgadmit's admission-control tables in PostgreSQL.

Usage:
  pgadmit [global flags] <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nGlobal flags (also accepted after the command):\n")
	printFlags(w, global)
	fmt.Fprint(w, `
Environment:
  DATABASE_URL  PostgreSQL connection string, unless --database-url is given. demo and bench
                start a throwaway local cluster on disk when neither is set.

Exit codes: 0 success, 1 failure (including doctor problems and bench checks off), 2 usage error.
Run 'pgadmit <command> --help' for the flags of a command.
`)
}

func (a *app) printCommandHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: pgadmit %s %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.help))
	fmt.Fprint(w, "\nFlags:\n")
	printFlags(w, fs)
	switch c.db {
	case dbRequired:
		fmt.Fprint(w, "\nNeeds a database: --database-url or DATABASE_URL.\n")
	case dbOptional:
		fmt.Fprint(w, "\nUses --database-url or DATABASE_URL when set, else starts a throwaway local cluster\n"+
			"(PostgreSQL's initdb, pg_ctl and postgres must be installed) and removes it at the end. It\n"+
			"lives on disk ($TMPDIR, else /var/tmp) with fsync on, as a real server's would, and preloads\n"+
			"pg_stat_statements when the installation has it.\n")
	}
	fmt.Fprint(w, "\nExit codes: 0 success, 1 failure, 2 usage error.\n")
}

// printFlags prints fs's flags in --name form, sorted, with --help last.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var all []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "h" && f.Name != "help" {
			all = append(all, f)
		}
	})
	slices.SortFunc(all, func(x, y *flag.Flag) int { return strings.Compare(x.Name, y.Name) })
	for _, f := range all {
		shown, defValue := *f, f.DefValue
		if h, ok := f.Value.(durationHint); ok {
			shown.Value = h.Value // so that UnquoteUsage names its type
			if d, err := time.ParseDuration(f.DefValue); err == nil {
				defValue = durationtext.Operator(d) // 24h, not 24h0m0s
			}
		}
		typ, usage := flag.UnquoteUsage(&shown)
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		def := ""
		// A usage that says its default itself (migrate's --to, whose -1 means "none given")
		// gets no second, raw one.
		// A zero value (false, 0, 0s) means off, and says nothing as a default.
		if !slices.Contains([]string{"", "false", "0", "0s"}, defValue) && !strings.Contains(usage, "(default") {
			def = fmt.Sprintf(" (default %s)", defValue)
		}
		fmt.Fprintf(w, "%s\n      %s%s\n", head, usage, def)
	}
	fmt.Fprint(w, "  -h, --help\n      show this help\n")
}

// connect opens a pool on dsn with at most maxConns connections (0: pgx's default) and checks
// that the database answers within the connect timeout. Its errors never hold a password.
func (a *app) connect(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := a.poolConfig(dsn, maxConns)
	if err != nil {
		return nil, err
	}
	return a.open(ctx, dsn, cfg)
}

// poolConfig parses dsn into a pool configuration with pgadmit's connect timeout (which bounds
// the pool's pings too) and application name, set up for the Limiter (ratelimit.ConfigurePool).
func (a *app) poolConfig(dsn string, maxConns int32) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message redacts on a best-effort basis; scrub removes what it missed.
		return nil, fmt.Errorf("invalid database URL: %s", scrub(err.Error(), dsn))
	}
	if a.connectTimeoutGiven || cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = a.connectTimeout
	}
	// pgxpool pings a connection idle for a second before it hands it out, by default without a
	// bound: to a server that froze, that ping outlives the Acquire that Ctrl-C cancelled by up to
	// a minute, holding its connection, and the pool's Close, each command's last step, waits for
	// it. A server that does not answer within the connect timeout is as good as gone.
	if cfg.PingTimeout <= 0 { // the URL's pool_ping_timeout wins
		cfg.PingTimeout = cfg.ConnConfig.ConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		name := "pgadmit"
		if a.cmd != nil {
			name += " " + a.cmd.name
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = name
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	ratelimit.ConfigurePool(cfg)
	return cfg, nil
}

// open opens a pool with cfg and pings it within the connect timeout.
func (a *app) open(ctx context.Context, dsn string, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectFailed(dsn, err)
	}
	timeout, from := a.connectTimeout, "--connect-timeout"
	if !a.connectTimeoutGiven && cfg.ConnConfig.ConnectTimeout != a.connectTimeout {
		timeout, from = cfg.ConnConfig.ConnectTimeout, "connect_timeout in the database URL"
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// pgx says only "context deadline exceeded"; its own connect timeout, as long as
		// ours, may fire first.
		if pctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			// It wraps the deadline, for errors.Is and errors.As only (pgx's error may hold the
			// connection string): the sweeper's metrics count the try as a timeout (promadmit).
			if !errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
			}
			return nil, &connectError{msg: fmt.Sprintf("cannot connect to %s: no answer within %s (%s)", redactDSN(dsn), timeout, from), err: err}
		}
		return nil, connectFailed(dsn, err)
	}
	return pool, nil
}

// connectError is open's failure to connect. Its message is scrubbed, safe to print; Unwrap
// gives pgx's error (which may hold the connection string), for errors.As only.
type connectError struct {
	msg string
	err error
}

// connectFailed is open's error for err, pgx's failure to connect to dsn.
func connectFailed(dsn string, err error) *connectError {
	return &connectError{msg: fmt.Sprintf("cannot connect to %s: %s", redactDSN(dsn), scrub(err.Error(), dsn)), err: err}
}

func (e *connectError) Error() string { return e.msg }
func (e *connectError) Unwrap() error { return e.err }

// parseScope parses a --scope value, TYPE:KEY as inspect and doctor show it (textcell.ParseScope:
// a part that begins with a quote is Go-quoted, so "tier:gold":"team a" names type tier:gold and
// key team a; a plain one is the text itself). A TYPE or KEY that no scope can have (one Reserve
// refuses: not valid UTF-8, a NUL byte, blank, over ratelimit.MaxScopeBytes) is a usage error
// too: sent to the server, text that is not UTF-8 failed with its raw SQLSTATE 22021.
func parseScope(s string) (typ, key string, err error) {
	typ, key, ok := textcell.ParseScope(s)
	if !ok || typ == "" || key == "" {
		return "", "", usagef(`bad --scope %q: want TYPE:KEY, such as api_key:team-42, as inspect shows it (a part that begins with " is Go-quoted: "tier:gold":"team a")`, s)
	}
	probe := ratelimit.Limit{Scope: ratelimit.Scope{Type: typ, Key: key}, Metric: ratelimit.MetricRequests}
	if invalid := (*ratelimit.ValidationError)(nil); errors.As(probe.Validate(), &invalid) {
		part, named := map[string]string{"Scope.Type": "TYPE", "Scope.Key": "KEY"}[invalid.Field]
		if !named {
			part = invalid.Field
		}
		return "", "", usagef("bad --scope %q: its %s %s", s, part, invalid.Reason)
	}
	return typ, key, nil
}
