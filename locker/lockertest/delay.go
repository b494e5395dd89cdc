package lockertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/locker"
)

// The fixed lease and the delay of RunLockDelay: their sum is whole
// seconds, which etcd's leases keep exactly. The slack is what a loaded
// machine adds to a hand-over (etcd's lessor looks for expired leases
// every 500ms).
const delayLease, lockDelay, delaySlack = time.Second, 2 * time.Second, 1500 * time.Millisecond

// RunLockDelay checks locker.WithLockDelay: a negative delay and a delay on
// a read-write lock or a semaphore are refused; an Unlock frees the name at
// once; a hold whose fixed lease ran out without Unlock bars its name for
// the delay (the holder's Lost closes at its lease's end, a waiter on
// another engine is granted no earlier than lease + delay, a TryLock in
// between fails); with no delay the name is free at the lease's end. Each
// factory call is another process's engine over the same servers.
func RunLockDelay(t *testing.T, factory Factory) {
	runCases(t, factory, []suiteCase{
		{"Refused", testDelayRefused},
		{"Unlock", testDelayUnlock},
		{"Expired", func(t *testing.T, f Factory) { delayExpired(t, f, lockDelay) }},
		{"Zero", func(t *testing.T, f Factory) { delayExpired(t, f, 0) }},
	})
}

func testDelayRefused(t *testing.T, f Factory) {
	e := open(t, f).Engine
	name := lockName(t, "m")
	wantRefused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, locker.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithLockDelay") {
			t.Errorf("%s = %v; want an error wrapping ErrInvalidArgument naming WithLockDelay", what, err)
		}
	}
	_, err := e.NewLocker(name, locker.WithLockDelay(-time.Second))
	wantRefused("NewLocker(WithLockDelay(-1s))", err)
	_, err = e.NewRWLock(name, locker.WithLockDelay(time.Second))
	wantRefused("NewRWLock(WithLockDelay(1s))", err)
	_, err = e.NewSemaphore(name, 2, locker.WithLockDelay(time.Second))
	wantRefused("NewSemaphore(WithLockDelay(1s))", err)
	if _, err := e.NewLocker(name, locker.WithLockDelay(0)); err != nil {
		t.Errorf("NewLocker(WithLockDelay(0)) = %v; want nil", err)
	}
}

// testDelayUnlock: a waiter on another engine is granted as soon as the
// holder unlocks, delay or not.
func testDelayUnlock(t *testing.T, f Factory) {
	a, b := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "m")
	opts := []locker.Option{locker.WithTTL(shortTTL(2*time.Second, a, b)), locker.WithLockDelay(10 * time.Second)}
	holder := newLocker(t, a, name, opts...)
	waiter := newLocker(t, b, name, opts...)
	mustLock(t, holder)
	got := make(chan time.Time, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		err := waiter.LockCtx(ctx)
		got <- time.Now()
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue; it is not a synchronisation
	unlocked := time.Now()
	mustUnlock(t, holder)
	at := <-got
	if err := <-errc; err != nil {
		t.Fatalf("waiter LockCtx() = %v; want nil", err)
	}
	defer func() { _ = waiter.Unlock() }() // not what is checked: a loaded machine may time it out
	if took := at.Sub(unlocked); took > delaySlack {
		t.Errorf("waiter granted %v after Unlock; want at once (within %v), the delay is for holds that end without Unlock", took, delaySlack)
	}
}

// delayExpired: a fixed lease whose owner never unlocks. The holder loses
// it at the lease's end; the name is granted again no earlier than lease +
// delay after the holder asked for it (the hold began after that), and no
// later than lease + delay + delaySlack after it was granted.
func delayExpired(t *testing.T, f Factory, delay time.Duration) {
	a, b := open(t, f).Engine, open(t, f).Engine
	name := lockName(t, "m")
	lease := max(delayLease, shortTTL(0, a, b))
	holder := newLocker(t, a, name, locker.WithLease(lease), locker.WithLockDelay(delay))
	waiter := newLocker(t, b, name, locker.WithTTL(shortTTL(2*time.Second, a, b)), locker.WithLockDelay(delay))
	asked := time.Now()
	mustLock(t, holder)
	granted := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, errc := make(chan time.Time, 1), make(chan error, 1)
	go func() {
		err := waiter.LockCtx(ctx)
		got <- time.Now()
		errc <- err
	}()

	select {
	case <-holder.Lost():
		if at := time.Since(granted); at > lease+delaySlack {
			t.Errorf("holder's Lost closed %v after the grant; want at its lease's end (%v)", at, lease)
		}
	case <-time.After(lease + delay + delaySlack):
		t.Errorf("holder's Lost still open %v after the grant; want closed at its lease's end (%v)", lease+delay+delaySlack, lease)
	}
	if delay > 0 {
		// Half-way through the delay, nobody may take the name.
		third := newLocker(t, b, name, locker.WithLockDelay(delay))
		mid := time.NewTimer(time.Until(granted.Add(lease + delay/2)))
		select {
		case <-mid.C:
		case at := <-got:
			got <- at // read below
		}
		mid.Stop()
		if ok, err := third.TryLock(); ok || err != nil {
			t.Errorf("TryLock() %v into the delay = %v, %v; want false, nil", time.Since(granted)-lease, ok, err)
			if ok {
				mustUnlock(t, third)
			}
		}
	}

	at := <-got
	if err := <-errc; err != nil {
		t.Fatalf("waiter LockCtx() = %v; want nil after lease + delay", err)
	}
	defer func() { _ = waiter.Unlock() }() // not what is checked: a loaded machine may time it out
	t.Logf("lease %v, delay %v: waiter granted %v after the holder asked, %v after its grant", lease, delay, at.Sub(asked), at.Sub(granted))
	if early := at.Sub(asked); early < lease+delay {
		t.Errorf("waiter granted %v after the holder asked; want no earlier than lease + delay = %v", early, lease+delay)
	}
	if late := at.Sub(granted); late > lease+delay+delaySlack {
		t.Errorf("waiter granted %v after the holder's grant; want within lease + delay + %v = %v", late, delaySlack, lease+delay+delaySlack)
	}
	if err := holder.Unlock(); !errors.Is(err, locker.ErrLockLost) {
		t.Errorf("holder Unlock() after its lease = %v; want ErrLockLost", err)
	}
}
