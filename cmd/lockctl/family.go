package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// parseKind reads holders' --kind.
func parseKind(s string) (inspect.Kind, error) {
	switch s {
	case "mutex":
		return inspect.KindMutex, nil
	case "rw":
		return inspect.KindWrite, nil
	case "semaphore":
		return inspect.KindPermit, nil
	}
	return 0, fmt.Errorf("--kind: %q is not mutex, rw or semaphore", s)
}

// printFamily prints the holds and waiters of the read-write lock or
// semaphore name on e.
func printFamily(ctx context.Context, w io.Writer, e locker.Engine, kind inspect.Kind, name string) error {
	in, ok := e.(inspect.FamilyInspector)
	if !ok {
		fmt.Fprintf(w, "%s\t-\t%s\t\t\n", e.Name(), noFamily(e, "inspect read-write locks or semaphores"))
		return nil
	}
	info, err := in.InspectFamily(ctx, kind, name)
	if err != nil {
		return err
	}
	if kind == inspect.KindPermit {
		fmt.Fprintf(w, "%s\tpermits\t%s stored, %d in use\t\t\n", e.Name(), storedCount(info.Permits), inUse(info.Holders))
	}
	if len(info.Holders) == 0 {
		fmt.Fprintf(w, "%s\tfree\t\t\t\n", e.Name())
	}
	for _, h := range info.Holders {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", e.Name(), familyRole(h), h.Owner, h.Token, timeLeft(h.TTL))
	}
	for i, h := range info.Waiters {
		fmt.Fprintf(w, "%s\twaiter %d (%s)\t%s\t%d\t%s\n", e.Name(), i+1, familyRole(h), h.Owner, h.Token, timeLeft(h.TTL))
	}
	return nil
}

// noFamily says that e cannot do what to read-write locks and semaphores,
// and why when the engine refuses them (a redlock engine: a quorum of
// independent nodes has no one queue for their grant rules).
func noFamily(e locker.Engine, what string) error {
	if _, err := e.NewSemaphore("lockctl", 1); errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("cannot %s on this engine: %w", what, err)
	}
	return fmt.Errorf("cannot %s on this engine", what)
}

func familyRole(h inspect.FamilyHolder) string {
	switch h.Kind {
	case inspect.KindRead:
		return "reader"
	case inspect.KindWrite:
		return "writer"
	}
	return fmt.Sprintf("%d permit(s)", h.Permits)
}

func storedCount(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

func inUse(hs []inspect.FamilyHolder) int {
	n := 0
	for _, h := range hs {
		n += h.Permits
	}
	return n
}

func runPermits(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("permits", "--config FILE [--engine ENGINE] NAME N",
		"  lockctl permits --config locks.yaml exports 8\n  lockctl permits --config locks.yaml --engine etcd-backup exports 8\n", stderr)
	path := fs.String("config", "", "config `FILE`")
	engine := fs.String("engine", "", "change only this `ENGINE` (default: every engine, so the count holds after a switch)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("want a semaphore NAME and a count N, got %d arguments", fs.NArg())
	}
	name := fs.Arg(0)
	if err := driver.ValidateName(name); err != nil {
		return err
	}
	n, err := strconv.Atoi(fs.Arg(1))
	if err != nil || n < 1 {
		return fmt.Errorf("count N: %q is not a count of at least 1", fs.Arg(1))
	}
	cfg, d, err := dialEngineOp(*path, *engine)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := opContext(cfg)
	defer cancel()
	var errs []error
	for _, dd := range d.engines.Dialed {
		err := dd.Err
		if err == nil {
			in, ok := dd.Engine.(inspect.FamilyInspector)
			if !ok {
				err = noFamily(dd.Engine, "change semaphores")
			} else {
				err = in.SetPermits(ctx, name, n)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dd.Name, err))
			continue
		}
		fmt.Fprintf(stdout, "%s: semaphore %q now has %d permits\n", dd.Name, name, n)
	}
	return errors.Join(errs...)
}
