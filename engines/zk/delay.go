package zk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// The lock delay (locker.WithLockDelay) on ZooKeeper. A hold is an
// ephemeral node that goes with its session, so nothing on the server
// outlives it by the delay on its own. Instead, a hold with a delay keeps
// a persistent marker node beside the lock nodes, "<lock>/delay", with
// data "held <delay>"; its Unlock deletes the marker before the lock node,
// so the next holder never sees it. A marker still "held" when the next
// one in line reaches the head was left by a hold that ended without
// Unlock (its session expired, its fixed lease ran out, an operator
// deleted its node): that one stamps it "ended <delay>", and the server's
// time of that write (its mtime) starts the bar. Whoever reaches the head
// of the line waits, or with TryLock gives up, until the bar's start plus
// the delay by the server's clock (it learns the server's time now by
// writing the marker again, with the start in it), then takes the marker
// over as "held <its delay>".
//
// A hold without a delay costs nothing: it never reads the marker. So the
// delay is kept only among Lockers that set one: give every Locker of a
// name the same WithLockDelay. A bar starts when the next in line finds
// the marker, at once when someone waits; when nobody does, the bar runs
// from the first attempt after. A marker left by a hold with no successor
// stays (with its container parent) until the next holder with a delay
// removes it at its Unlock.
const (
	delayNode   = "delay"
	markerHeld  = "held"
	markerEnded = "ended"
)

// errBarred ends a TryLock that reached the head of the line during a
// bar: contention, not an error.
var errBarred = errors.New("zk: name barred by a lock delay")

// delayMark is the data of a delay marker: "held <delay ns> <node>", by
// the hold of that lock node, or "ended <delay ns> <start ms>" (start 0:
// the mtime of the write that ended it).
type delayMark struct {
	ended bool
	delay time.Duration
	node  string // held: the holder's lock node
	start int64  // ended: server ms
}

func (m delayMark) bytes() []byte {
	if !m.ended {
		return []byte(fmt.Sprintf("%s %d %s", markerHeld, int64(m.delay), m.node))
	}
	return []byte(fmt.Sprintf("%s %d %d", markerEnded, int64(m.delay), m.start))
}

// parseMarker reads a marker's data; anything else reads as an ended hold
// of no delay, which bars nothing.
func parseMarker(data []byte) delayMark {
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return delayMark{ended: true}
	}
	d, _ := strconv.ParseInt(f[1], 10, 64)
	m := delayMark{delay: time.Duration(max(d, 0))}
	switch f[0] {
	case markerHeld:
		m.node = f[2]
	case markerEnded:
		m.ended = true
		m.start, _ = strconv.ParseInt(f[2], 10, 64)
	default:
		return delayMark{ended: true}
	}
	return m
}

func markerPath(parent string) string { return parent + "/" + delayNode }

// waitBar runs when n, h's node, reached the head of the line and h has a
// delay: it waits out the bar a hold that ended without Unlock left on the
// name (with wait false, it returns errBarred instead), then takes the
// marker over for h. It returns errRestart when n is lost meanwhile, and
// ctx.Err() when ctx ends during the bar.
func (e *Engine) waitBar(ctx context.Context, h *driver.Hold, n *node, wait bool) error {
	path := markerPath(n.parent)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// No marker is the common case: create one at once, read it only
	// when it exists.
	left, version := time.Duration(0), int32(-1)
	for {
		switch {
		case left > 0 && !wait:
			return errBarred
		case left > 0:
			timer.Reset(left)
			if _, err := await(e, ctx, h, n, timer.C); err != nil {
				return err
			}
		default:
			switch err := e.claimBar(ctx, h, path, version, n); {
			case err == nil:
				return nil
			case !errors.Is(err, errRetryBar):
				return e.abandon(ctx, h, n, err)
			}
		}
		var err error
		if left, version, err = e.bar(ctx, h, n, path); err != nil {
			return e.abandon(ctx, h, n, err)
		}
	}
}

// errRetryBar: the marker changed between a read and a write; read again.
var errRetryBar = errors.New("zk: delay marker changed")

// bar reads the marker at path and says how much of its bar is left, by
// the server's clock, and the marker's version (-1: there is none). A
// marker held by n itself (a create whose reply was lost) bars nothing.
func (e *Engine) bar(ctx context.Context, h *driver.Hold, n *node, path string) (time.Duration, int32, error) {
	for {
		h.Asking()
		data, was, err := e.get(ctx, path)
		switch {
		case errors.Is(err, gozk.ErrNoNode):
			return 0, -1, nil
		case err != nil:
			return 0, 0, err
		}
		m := parseMarker(data)
		if !m.ended && m.node == n.name {
			return 0, was.Version, nil
		}
		if m.ended && m.start == 0 {
			m.start = was.Mtime // the write that ended it
		}
		m.ended = true
		// Written again, to learn the server's time now: its mtime.
		h.Asking()
		st, err := zkconn.Do(ctx, e.zc, func() (*gozk.Stat, error) { return e.conn.Set(path, m.bytes(), was.Version) })
		switch {
		case errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
			continue
		case err != nil:
			return 0, 0, err
		}
		start := m.start
		if start == 0 {
			start = st.Mtime // it ended now
		}
		return time.Duration(start-st.Mtime)*time.Millisecond + m.delay, st.Version, nil
	}
}

// claimBar makes the marker at path h's: "held" with h's delay, created
// when there is none (version -1). It records the marker's version on n
// for the release.
func (e *Engine) claimBar(ctx context.Context, h *driver.Hold, path string, version int32, n *node) error {
	data := delayMark{delay: h.Delay, node: n.name}.bytes()
	h.Asking()
	var st *gozk.Stat
	var err error
	if version < 0 {
		// Touching the parent keeps its count of extra writes, which
		// tokens rest on (weight.go).
		err = e.zc.CreateTouching(ctx, n.parent, path, data, e.acl)
		version = 0
	} else {
		st, err = zkconn.Do(ctx, e.zc, func() (*gozk.Stat, error) { return e.conn.Set(path, data, version) })
		if err == nil {
			version = st.Version
		}
	}
	switch {
	case errors.Is(err, gozk.ErrNodeExists), errors.Is(err, gozk.ErrBadVersion), errors.Is(err, gozk.ErrNoNode):
		return errRetryBar
	case err != nil:
		return err
	}
	n.marker = version
	return nil
}

// dropBar deletes the marker of n, h's, before its release: a clean
// release leaves no bar. A marker that changed meanwhile is someone
// else's; one that cannot be deleted now only makes the next holder wait
// the delay.
func (e *Engine) dropBar(ctx context.Context, h *driver.Hold, n *node) {
	if n.marker < 0 {
		return
	}
	_, err := zkconn.Do(ctx, e.zc, func() (struct{}, error) {
		return struct{}{}, e.conn.Delete(markerPath(n.parent), n.marker)
	})
	if err != nil && !errors.Is(err, gozk.ErrNoNode) && !errors.Is(err, gozk.ErrBadVersion) {
		e.log.Debug("zk: deleting a delay marker failed; the next holder waits the delay", "name", h.Name, "err", err)
	}
}

// Expire implements driver.Expirer: a fixed lease with a lock delay ran
// out. Its node goes, its marker stays: the name is barred for the delay.
func (e *Engine) Expire(ctx context.Context, h *driver.Hold) error {
	return e.releaseNode(ctx, h)
}
