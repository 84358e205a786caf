// Command gpuprof profiles multi-GPU MPI jobs: run wraps a launcher so each
// rank is measured by a collector, a reduction tree merges the ranks over
// NATS, and the root writes one whole-job report and exports.
//
// This package only parses flags and wires the stages together.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strings"
	"syscall"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(args []string) error) {
	commands[name] = command{summary, run}
}

// exitError carries an exit code (the application's) through error returns.
type exitError struct{ code int }

// exitFailure is gpuprof's own exit status when it fails (bad flags, a
// missing injection library, an unreachable broker, a failed reduction):
// 125, as env(1), timeout(1) and container runners use for their own
// failures, so that it cannot be mistaken for a wrapped application's
// status (1, 2, 126 and 127 and 128+signal are common there).
const exitFailure = 125

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func usage() {
	fmt.Fprintf(os.Stderr, "gpuprof: a distributed profiler for multi-GPU MPI jobs\n\nUsage: gpuprof COMMAND [flags] [args]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	w := 0
	for _, n := range names {
		w = max(w, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-*s %s\n", w, n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\n'gpuprof COMMAND --help' describes a command. gpuprof's own failures exit\nwith status %d; run and collect otherwise exit with the application's status.\n", exitFailure)
}

// usages print each command's usage line, description and flags.
var usages = map[string]func(io.Writer){}

// newFlags returns a flag set for command name. A flag error is one line
// (main prints it, naming --help); --help prints the usage line, the
// description and the flags on stdout.
func newFlags(name, usageLine, desc string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	usages[name] = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: gpuprof %s %s\n\n%s\n\nFlags:\n", name, usageLine, strings.TrimSpace(desc))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// printUsage prints fs's command usage on stderr (for a command given too
// few arguments).
func printUsage(fs *flag.FlagSet) {
	if u := usages[fs.Name()]; u != nil {
		u(os.Stderr)
	}
}

func main() {
	// Profiles, reports and broker storage name the user's code and hosts:
	// everything gpuprof writes is readable by the user only.
	syscall.Umask(0o077)
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})))
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "gpuprof: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	stop := startCPUProfile(os.Getenv("GPUPROF_CPUPROFILE"))
	stopTrace := startTrace(os.Getenv("GPUPROF_TRACE"))
	err := c.run(os.Args[2:])
	stopTrace()
	stop()
	var ee exitError
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		name := os.Args[1]
		if len(os.Args) > 2 && usages[name+" "+os.Args[2]] != nil { // a subcommand: capture trim
			name += " " + os.Args[2]
		}
		if u := usages[name]; u != nil {
			u(os.Stdout)
		}
	case errors.As(err, &ee):
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "gpuprof %s: %s\n", os.Args[1], oneLine(err))
		os.Exit(exitFailure)
	}
}

// oneLine is err's message on one line, with a pointer to --help for flag
// errors (the flag package's messages do not name the command's flags).
func oneLine(err error) string {
	s := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	for _, p := range []string{"flag provided but not defined", "invalid value", "invalid boolean", "flag needs an argument", "bad flag syntax"} {
		if strings.HasPrefix(s, p) {
			return s + fmt.Sprintf(" ('gpuprof %s --help' lists the flags)", os.Args[1])
		}
	}
	return s
}

// startCPUProfile writes a CPU profile of the whole command to path (none
// if empty), for finding where a collector's analysis spends its time on a
// real application; the returned function ends it.
func startCPUProfile(path string) (stop func()) {
	return startRecording(path, "CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace writes Go's execution trace of the whole command to path (none
// if empty): where the analysis' goroutines wait, and for what, which a CPU
// profile cannot show (go tool trace -pprof=sched FILE).
func startTrace(path string) (stop func()) {
	return startRecording(path, "execution trace", trace.Start, trace.Stop)
}

// startRecording starts a runtime recording into path. One that cannot be
// written is a warning: the command runs on.
func startRecording(path, what string, start func(io.Writer) error, end func()) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		slog.Warn("no "+what, "file", path, "err", err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		end()
		if err := f.Close(); err != nil {
			slog.Warn(what, "file", path, "err", err)
		}
	}
}

func logLevel() slog.Level {
	switch os.Getenv("GPUPROF_LOG") {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// parseAll parses flags that may come before or after the positional
// arguments (gpuprof report DIR --sass X), up to a "--".
func parseAll(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
