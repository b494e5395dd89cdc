package idem

import (
	"bytes"
	"sync"
	"time"
)

// local is what the gate knows without a round trip: the attempts of this
// process that have not been recorded yet (running, or with their outcome
// pending), and, with WithLocalCache, recent succeeded records. The first
// answers a duplicate even when the attempt's store is not the one the
// duplicate would go to (after a switch) or does not answer (an outage).
type local struct {
	mu       sync.Mutex
	inflight map[string]*Ticket
	sweepAt  int // sweep expired attempts when inflight grows past this

	size  int // 0: no cache
	ttl   time.Duration
	cache map[string]cached
	order []string // cache keys, oldest first (FIFO eviction)

	// The latest successes of this process, a ring of at most recentCap
	// (next is where the next goes): a switch copies those of the last
	// recentFor to the new store, since the old one may not answer the
	// duplicates' WithCheckPrevious.
	recent    []recentRec
	next      int
	recentCap int
	recentFor time.Duration
}

type recentRec struct {
	key  string
	rec  Record
	from Store
	at   time.Time
}

type cached struct {
	rec   Record
	store string
	until time.Time
}

const minSweep = 1024

func newLocal(size int, ttl time.Duration, recentCap int, recentFor time.Duration) *local {
	l := &local{inflight: make(map[string]*Ticket), sweepAt: minSweep, size: size, ttl: ttl, recentCap: recentCap, recentFor: recentFor}
	if size > 0 {
		l.cache = make(map[string]cached, size)
	}
	return l
}

// lookup returns what this process knows of key at now, nil when nothing.
func (l *local) lookup(key string, fp []byte, now time.Time) *Duplicate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.inflight[key]; t != nil {
		if now.Before(t.until) {
			d := &Duplicate{State: Running, Begun: t.rec.Begun, Store: t.store.Name(),
				Mismatch: fp != nil && !bytes.Equal(fp, t.rec.Fingerprint)}
			if t.outcome == Succeeded {
				d.State, d.Result = Succeeded, t.result
			}
			return d
		}
		delete(l.inflight, key) // its record has expired on the store too
	}
	if l.cache == nil {
		return nil
	}
	c, ok := l.cache[key]
	if !ok {
		return nil
	}
	if !now.Before(c.until) {
		delete(l.cache, key)
		return nil
	}
	return &Duplicate{State: Succeeded, Begun: c.rec.Begun, Result: c.rec.Result, Store: c.store,
		Mismatch: fp != nil && !bytes.Equal(fp, c.rec.Fingerprint)}
}

// running notes an attempt of this process.
func (l *local) running(t *Ticket) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.inflight) >= l.sweepAt { // attempts abandoned without Done
		now := time.Now()
		for k, o := range l.inflight {
			if !now.Before(o.until) {
				delete(l.inflight, k)
			}
		}
		l.sweepAt = max(minSweep, 2*len(l.inflight))
	}
	l.inflight[t.key] = t
}

// settled forgets an attempt whose outcome the store has (or that no
// longer owns its record), and caches a success recorded with result.
func (l *local) settled(t *Ticket, succeeded bool, result []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[t.key] == t {
		delete(l.inflight, t.key)
	}
	if !succeeded {
		return
	}
	rec := t.rec
	rec.State, rec.Result = Succeeded, result
	if l.cache != nil {
		l.putLocked(t.key, rec, t.store.Name())
	}
	if l.recentCap > 0 {
		r := recentRec{key: t.key, rec: rec, from: t.store, at: time.Now()}
		if len(l.recent) < l.recentCap {
			l.recent = append(l.recent, r)
		} else {
			l.recent[l.next] = r // the oldest
		}
		l.next = (l.next + 1) % l.recentCap
	}
}

// put caches a succeeded record read from a store.
func (l *local) put(key string, rec Record, store string) {
	if l.cache == nil || rec.State != Succeeded {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putLocked(key, rec, store)
}

func (l *local) putLocked(key string, rec Record, store string) {
	if _, ok := l.cache[key]; !ok {
		for len(l.cache) >= l.size && len(l.order) > 0 {
			delete(l.cache, l.order[0])
			l.order = l.order[1:]
		}
		l.order = append(l.order, key)
	}
	l.cache[key] = cached{rec: rec, store: store, until: time.Now().Add(l.ttl)}
	if len(l.order) > 2*l.size { // keys deleted on expiry linger in order
		live := l.order[:0]
		for _, k := range l.order {
			if _, ok := l.cache[k]; ok {
				live = append(live, k)
			}
		}
		l.order = live
	}
}

// forget drops key, for Gate.Forget.
func (l *local) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cache, key)
	delete(l.inflight, key)
}
