package switcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"
)

// Announcements keep a switcher's Member fresh in a shared source: on
// every change, and every announceEvery so that a lease-based record
// (etcd) stays alive while the process does.
const (
	announceEvery   = 5 * time.Second
	announceTimeout = 2 * time.Second
)

// memberID names one switcher of a fleet: host:pid:name:random.
func memberID(name string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%d:%s:%s", host, os.Getpid(), name, hex.EncodeToString(b[:]))
}

// Member returns what this switcher announces through a shared source.
func (s *Switcher) Member() Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := Member{ID: s.id, Engine: s.members[s.current].engine.Name(), Epoch: s.epoch, Since: s.switchedAt}
	if s.desired >= 0 {
		m.Desired = s.members[s.desired].engine.Name()
	}
	for _, e := range s.members {
		if !e.closed.Load() {
			m.Down = append(m.Down, e.engine.Name())
		}
	}
	return m
}

// changed wakes the announcers.
func (s *Switcher) changed() {
	for _, c := range s.announced {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// announce publishes the Member through a until Close, then retracts it.
func (s *Switcher) announce(ctx context.Context, a Announcer, kick <-chan struct{}) {
	defer s.wg.Done()
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	failing := false
	for {
		m := s.Member()
		actx, cancel := context.WithTimeout(ctx, announceTimeout)
		err := s.announceTo(actx, a, m)
		cancel()
		if err != nil && ctx.Err() == nil && !failing {
			s.log.Warn("switcher: cannot announce this process to the shared source; will retry", "err", err)
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceTimeout)
			_ = a.Retract(rctx, m.ID)
			cancel()
			return
		case <-kick:
		case <-t.C:
		}
	}
}
