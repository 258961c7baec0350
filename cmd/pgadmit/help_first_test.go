package main

import (
	"strings"
	"testing"
)

// --help before the command shows that command's help, as `pgadmit help <command>` and
// `pgadmit <command> --help` do: `pgadmit --help migrate` printed the global help. An unknown
// command after it is a usage error, as it is after `help`.
func TestHelpBeforeTheCommandShowsItsHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		want := cliOK(t, c.name, "--help")
		for _, args := range [][]string{
			{"--help", c.name},
			{"-h", c.name},
			{"--database-url", "postgres://u@127.0.0.1:1/db", "--help", c.name},
			{"--help", c.name, "--batch-size", "3"},
		} {
			out, errOut, code := cli(t, nil, args...)
			if code != exitOK || out != want || errOut != "" {
				t.Errorf("pgadmit %s: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and:\n%s", strings.Join(args, " "), code, errOut, out, want)
			}
		}
	}
	if out := cliOK(t, "--help", "migrate", "up"); out != cliOK(t, "migrate", "--help") {
		t.Errorf("pgadmit --help migrate up:\n%s", out)
	}
	if out := cliOK(t, "--help", "help"); !strings.HasPrefix(out, "pgadmit operates") {
		t.Errorf("pgadmit --help help:\n%s", out)
	}
	// --help before help is help itself: `pgadmit --help help migrate` printed the global help.
	for _, args := range [][]string{{"--help", "help", "migrate"}, {"-h", "help", "migrate"}} {
		out, errOut, code := cli(t, nil, args...)
		if code != exitOK || out != cliOK(t, "migrate", "--help") || errOut != "" {
			t.Errorf("pgadmit %s: exit %d, stderr %q, stdout:\n%s\nwant migrate's help", strings.Join(args, " "), code, errOut, out)
		}
	}
	// --help after or around help <command> changes nothing either: `pgadmit help migrate --help`
	// and `pgadmit help --help migrate` were usage errors.
	for _, args := range [][]string{
		{"help", "migrate", "--help"}, {"help", "--help", "migrate"}, {"help", "-h", "migrate", "--help"},
		{"--help", "help", "migrate", "--help"}, {"--help", "help", "--help", "migrate"},
	} {
		out, errOut, code := cli(t, nil, args...)
		if code != exitOK || out != cliOK(t, "migrate", "--help") || errOut != "" {
			t.Errorf("pgadmit %s: exit %d, stderr %q, stdout:\n%s\nwant migrate's help", strings.Join(args, " "), code, errOut, out)
		}
	}
	for _, args := range [][]string{{"--help", "help", "help"}, {"--help", "help", "--help"}, {"help", "--help", "-h"}, {"help", "help", "--help"}} {
		if out := cliOK(t, args...); !strings.HasPrefix(out, "pgadmit operates") {
			t.Errorf("pgadmit %s:\n%s", strings.Join(args, " "), out)
		}
	}
	for args, want := range map[string]string{
		"--help help nosuch":     `unknown command "nosuch"`,
		"--help help migrate up": `unexpected argument "up" after help migrate`,
		"help migrate --help up": `unexpected argument "up" after help migrate`,
		"help --help nosuch":     `unknown command "nosuch"`,
	} {
		out, errOut, code := cli(t, nil, strings.Fields(args)...)
		if code != exitUsage || out != "" || errOut != "pgadmit: "+want+" (see pgadmit --help)\n" {
			t.Errorf("pgadmit %s: exit %d, stdout %q, stderr %q; want a usage error, as without --help", args, code, out, errOut)
		}
	}
	out, errOut, code := cli(t, nil, "--help", "nosuch")
	if code != exitUsage || out != "" || errOut != "pgadmit: unknown command \"nosuch\" (see pgadmit --help)\n" {
		t.Errorf("pgadmit --help nosuch: exit %d, stdout %q, stderr %q; want a usage error", code, out, errOut)
	}
}
