// Command lockctl runs failover drills and lock operations for orthrus.
//
//	lockctl drill [flags]                  run a lock workload, break an engine, check and report
//	lockctl status  --config FILE          where the fleet's processes run, what the source names, each engine's health
//	lockctl holders --config FILE NAME     who holds NAME on each engine, and who waits
//	lockctl holders --config FILE --kind rw|semaphore NAME   the same for a read-write lock or a semaphore
//	lockctl permits --config FILE NAME N   store N as semaphore NAME's permit count
//	lockctl unlock  --config FILE --force NAME   remove a stuck hold
//	lockctl switch  --config FILE ENGINE   write the source so that every process watching it moves to ENGINE
//	lockctl idem lookup|delete --config FILE --app KEY CONTENT   an idempotency record
//
// The operation commands check their arguments first, then dial only what
// they need (switch: the source and ENGINE; holders and unlock with
// --engine: that engine), in parallel, within the config's start_timeout,
// so that they work while another engine is down. status probes every
// engine and the source at once for at most 1s each (start_timeout when
// shorter), so that it answers within about a second while a server hangs.
//
// status counts the processes on each engine from the roster that an etcd
// or zk source keeps (every switcher announces its engine and epoch
// there); a file source, or none, keeps no roster, and status says that it
// cannot see where processes run rather than guess. switch moves every
// process watching the source to ENGINE whatever the source named before:
// an etcd key or zk node gets a new version, and a file that names ENGINE
// already is rewritten unchanged, which its watchers apply again (after a
// breaker switch, this is the one command that brings them back). A drill on a config
// keeps its locks under drill-only prefixes, removed at the end, and puts
// a source it flipped back as it was.
//
// Flags may come before or after a command's arguments; "--" ends them
// (for a NAME that starts with "-"). Run "lockctl COMMAND -h" for a
// command's flags and examples.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// errChecksFailed makes the exit code non-zero after a report was printed.
var errChecksFailed = errors.New("checks failed")

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"drill", "run a lock workload through the switcher, inject a fault, check and report", runDrill},
		{"status", "show where the fleet's processes run, what the source names, and each engine's health", runStatus},
		{"holders", "show who holds a lock on each engine, and who waits", runHolders},
		{"unlock", "remove a stuck hold (asks for confirmation unless --yes)", runUnlock},
		{"permits", "change the permit count stored with a semaphore on every engine", runPermits},
		{"switch", "write the source so that every process watching it moves to ENGINE, whatever it named before", runSwitch},
		{"idem", "look up or delete the idempotency record of an operation (lookup, delete)", runIdem},
	}
}

func main() {
	os.Exit(lockctl(os.Args[1:], os.Stdout, os.Stderr))
}

func lockctl(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errChecksFailed):
			return 1
		default:
			fmt.Fprintf(stderr, "lockctl %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "lockctl: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "lockctl: failover drills and lock operations for orthrus.\n\nUsage: lockctl COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"lockctl COMMAND -h\" for a command's flags and examples.")
}

// cmdFlags is a command's flag set that, unlike flag.FlagSet, reads flags
// after the positional arguments too ("holders NAME --config f"), since
// people add a flag at the end of a command line; "--" ends the flags.
type cmdFlags struct {
	*flag.FlagSet
	args []string
}

// newFlags returns a flag set whose -h prints the usage and examples.
func newFlags(name, synopsis, examples string, stderr io.Writer) *cmdFlags {
	fs := flag.NewFlagSet("lockctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lockctl %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nExamples:\n%s", examples)
	}
	return &cmdFlags{FlagSet: fs}
}

// Parse reads the flags wherever they are in args and keeps the other
// arguments, in order, for Args.
func (f *cmdFlags) Parse(args []string) error {
	f.args = nil
	for {
		if err := f.FlagSet.Parse(args); err != nil {
			return err
		}
		rest := f.FlagSet.Args()
		if len(rest) == 0 {
			return nil
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			f.args = append(f.args, rest...)
			return nil
		}
		f.args = append(f.args, rest[0])
		args = rest[1:]
	}
}

// Args returns the positional arguments.
func (f *cmdFlags) Args() []string { return f.args }

// NArg returns the number of positional arguments.
func (f *cmdFlags) NArg() int { return len(f.args) }

// Arg returns the i'th positional argument, "" if there is none.
func (f *cmdFlags) Arg(i int) string {
	if i < 0 || i >= len(f.args) {
		return ""
	}
	return f.args[i]
}
