package lockertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/inspect"
)

// weightCycle is the weights of the ordered waiters, in their order of
// arrival.
var weightCycle = []int{1, 3, 2, 10}

// testWeighted: an engine that ranks waiters by weight (driver.Weigher)
// grants the heaviest first, FIFO within a weight, never takes a hold
// from its holder for a heavier waiter, and grants or refuses TryLock as
// without a weight. An engine that does not refuses a weight above 1 at
// once, with an error wrapping errors.ErrUnsupported: which of the two
// the engine is, its answer to a TryLock with a weight says.
func testWeighted(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "w")
	probe := newLocker(t, e, name, locker.WithWeight(3))
	ok, err := probe.TryLock()
	if errors.Is(err, errors.ErrUnsupported) {
		wantWeightRefused(t, probe, err)
		return
	}
	if !ok || err != nil {
		t.Fatalf("TryLock() with WithWeight(3) on a free name = %v, %v; want true, nil (or ErrUnsupported)", ok, err)
	}
	mustUnlock(t, probe)
	t.Run("Order", func(t *testing.T) { WeightOrder(t, []locker.Engine{e}) })
	t.Run("HolderKeeps", func(t *testing.T) { testWeightHolderKeeps(t, e) })
	t.Run("TryLock", func(t *testing.T) { testWeightTryLock(t, e) })
}

// wantWeightRefused checks an engine's refusal of a weight: TryLock's
// err, then Lock's, at once rather than after a wait.
func wantWeightRefused(t *testing.T, l locker.Locker, err error) {
	if !strings.Contains(err.Error(), "WithWeight(3)") {
		t.Errorf("TryLock() with WithWeight(3) = %v; want an error naming WithWeight(3)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.LockCtx(ctx); !errors.Is(err, errors.ErrUnsupported) || ctx.Err() != nil {
		t.Errorf("LockCtx() with WithWeight(3) = %v; want ErrUnsupported at once", err)
	}
}

// WeightOrder: 20 waiters of mixed weights, the i-th an owner on
// engines[i%len(engines)] (processes of a fleet, sessions on different
// members of a cluster), queued one after another behind a holder, are
// granted weight by weight, heaviest first, and in their order of arrival
// within a weight; each holds with a token above the one before it. The
// engines must rank waiters by weight, and the first must show a name's
// waiters (Inspect or InspectFamily).
func WeightOrder(t *testing.T, engines []locker.Engine) {
	e := engines[0]
	name := lockName(t, "wo")
	holder := newLocker(t, e, name)
	mustLock(t, holder)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 20
	waiters, weights := make([]locker.Handle, n), make([]int, n)
	granted := make(chan int, n)
	for i := range n {
		weights[i] = weightCycle[i%len(weightCycle)]
		waiters[i] = newLocker(t, engines[i%len(engines)], name, locker.WithWeight(weights[i]))
		go func() {
			if waiters[i].LockCtx(ctx) == nil {
				granted <- i
			}
		}()
		awaitMutexWaiters(t, e, name, i+1)
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	slices.SortStableFunc(want, func(a, b int) int { return cmp.Compare(weights[b], weights[a]) })
	last := holder.Token()
	mustUnlock(t, holder)
	var got []int
	for range n {
		select {
		case i := <-granted:
			got = append(got, i)
			if tok := waiters[i].Token(); tok <= last {
				t.Errorf("waiter %d (weight %d) holds with token %d, not above the previous grant's %d", i, weights[i], tok, last)
			}
			last = waiters[i].Token()
			mustUnlock(t, waiters[i])
		case <-time.After(20 * time.Second):
			t.Fatalf("grants %v, then none within 20s; want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("grant order (waiter: weight) %s; want %s", weighed(got, weights), weighed(want, weights))
	}
}

func weighed(order, weights []int) string {
	var b strings.Builder
	for _, i := range order {
		fmt.Fprintf(&b, " %d:%d", i, weights[i])
	}
	return b.String()
}

// testWeightHolderKeeps: a heavy waiter that comes while a light owner
// holds waits for its Unlock, and then passes a lighter waiter.
func testWeightHolderKeeps(t *testing.T, e locker.Engine) {
	name := lockName(t, "wh")
	holder, light, lightDone := heldWithWaiter(t, e, name)
	heavy := newLocker(t, e, name, locker.WithWeight(10))
	heavyDone := lockAsync(t.Context(), heavy)
	awaitMutexWaiters(t, e, name, 2)
	WantPending(t, heavyDone, "a weight-10 waiter behind a weight-1 holder")
	select {
	case <-holder.Lost():
		t.Fatal("the holder's Lost() closed when a heavier waiter came")
	default:
	}
	mustUnlock(t, holder)
	WantGranted(t, heavyDone, "the weight-10 waiter once the holder left")
	WantPending(t, lightDone, "the weight-1 waiter while the weight-10 one holds")
	mustUnlock(t, heavy)
	WantGranted(t, lightDone, "the weight-1 waiter last")
	mustUnlock(t, light)
}

// testWeightTryLock: TryLock with a weight does not pass a waiter, and
// gets a free name.
func testWeightTryLock(t *testing.T, e locker.Engine) {
	name := lockName(t, "wt")
	holder, waiter, done := heldWithWaiter(t, e, name)
	try := newLocker(t, e, name, locker.WithWeight(10))
	wantTry(t, try, false)
	mustUnlock(t, holder)
	WantGranted(t, done, "the waiter once the holder left")
	wantTry(t, try, false)
	mustUnlock(t, waiter)
	wantTry(t, try, true)
	mustUnlock(t, try)
}

// heldWithWaiter locks name with a holder of weight 1 and queues a waiter
// of weight 1 behind it, whose LockCtx result done carries; the waiter
// gives up when the test ends.
func heldWithWaiter(t *testing.T, e locker.Engine, name string) (holder, waiter locker.Handle, done <-chan error) {
	holder, waiter = newLocker(t, e, name), newLocker(t, e, name)
	mustLock(t, holder)
	done = lockAsync(t.Context(), waiter)
	awaitMutexWaiters(t, e, name, 1)
	return holder, waiter, done
}

// awaitMutexWaiters waits until n waiters of the mutex name are visible,
// through Inspect or else InspectFamily.
func awaitMutexWaiters(t *testing.T, e locker.Engine, name string, n int) {
	t.Helper()
	if op, ok := e.(inspect.Inspector); ok {
		eventually(t, 10*time.Second, fmt.Sprintf("%d waiters of %q visible", n, name), func() bool {
			in, err := op.Inspect(context.Background(), name)
			return err == nil && len(in.Waiters) == n
		})
		return
	}
	awaitWaiters(t, e, inspect.KindMutex, name, n)
}
