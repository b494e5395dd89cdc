package elect

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

// MaxValueLen is the longest value a candidate may publish, in bytes.
const MaxValueLen = 128

// ErrNoLeader is returned by CurrentLeader when nobody leads.
var ErrNoLeader = errors.New("elect: no leader")

type settings struct {
	ttl   time.Duration
	value string
	obs   Observer
}

// Option configures a Candidate.
type Option func(*settings) error

// WithTTL sets how long the leadership outlives a leader that stops
// renewing it (its process died, froze or lost the engine): the next
// leader is elected within about this long. Default: driver.DefaultTTL
// (30s). On ZooKeeper the session timeout rules instead.
func WithTTL(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: elect: WithTTL(%v): must be positive", locker.ErrInvalidArgument, d)
		}
		s.ttl = d
		return nil
	}
}

// WithValue publishes v with the leadership, for observers (an address to
// send work to, say). Default: "".
func WithValue(v string) Option {
	return func(s *settings) error {
		if len(v) > MaxValueLen {
			return fmt.Errorf("%w: elect: WithValue: %d bytes, over the limit of %d", locker.ErrInvalidArgument, len(v), MaxValueLen)
		}
		s.value = v
		return nil
	}
}

// Leader is the leader of an election as observers see it.
type Leader struct {
	Engine string // the engine the leadership was found on: through a switcher, the one holding it
	Owner  string // the leader's owner ID: host:pid:random/value
	Host   string
	PID    int
	Value  string // what the leader published (WithValue)
	Token  uint64 // the engine's fencing token of the leadership
}

// parseLeader reads a Leader from the owner ID of a hold.
func parseLeader(engine, owner string, token uint64) Leader {
	l := Leader{Engine: engine, Owner: owner, Token: token}
	id, value, _ := strings.Cut(owner, "/")
	l.Value = value
	parts := strings.SplitN(id, ":", 3)
	if len(parts) == 3 {
		l.Host = parts[0]
		l.PID, _ = strconv.Atoi(parts[1])
	}
	return l
}

// ownerID is host:pid:random/value: unique per candidate, and readable by
// observers through the engine's inspection.
func ownerID(value string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux since Go 1.24
	return fmt.Sprintf("%s:%d:%s/%s", host, os.Getpid(), hex.EncodeToString(b[:]), value)
}

// state is where a candidate stands.
type state int

const (
	idle state = iota
	campaigning
	leading
)

// Candidate is one participant of the election of name on an engine or a
// switcher. It campaigns once at a time: Campaign blocks until it leads,
// and it leads until Resign or until the leadership is lost. It is safe
// for concurrent use.
type Candidate struct {
	engine locker.Engine
	name   string
	owner  string
	ttl    time.Duration
	obs    Observer // nil: none

	mu      sync.Mutex
	state   state
	hold    locker.Handle
	cancel  context.CancelFunc // ends the leadership context
	watched <-chan struct{}    // closed once the leadership's end is reported; nil without an observer
}

// New returns a candidate for the leadership of name on e, which may be a
// switcher (see the package documentation for how leadership crosses a
// switch).
func New(e locker.Engine, name string, opts ...Option) (*Candidate, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: elect: New(%q): engine is nil", locker.ErrInvalidArgument, name)
	}
	if err := driver.ValidateName(name); err != nil {
		return nil, fmt.Errorf("elect: New: %w", err)
	}
	s := settings{ttl: driver.DefaultTTL}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: elect: New(%q): nil Option", locker.ErrInvalidArgument, name)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	return &Candidate{engine: e, name: name, owner: ownerID(s.value), ttl: s.ttl, obs: s.obs}, nil
}

// Owner is the candidate's owner ID, as Leader.Owner reports it.
func (c *Candidate) Owner() string { return c.owner }

// Campaign blocks until the candidate leads, or until ctx is done, when it
// returns ctx.Err() and leaves nothing behind. It returns the leadership
// context, which ends when the leadership does: with a cause wrapping
// locker.ErrLockLost when it is lost, context.Canceled on Resign. A
// candidate already campaigning or leading gets an error wrapping
// locker.ErrInvalidArgument; after losing the leadership it may campaign
// again.
func (c *Candidate) Campaign(ctx context.Context) (lctx context.Context, err error) {
	start := time.Now()
	defer func() { c.campaigned(start, err) }()
	if err := c.begin(); err != nil {
		return nil, err
	}
	h, err := c.win(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.state = idle
		return nil, err
	}
	lctx, cancel := locker.HoldContext(context.Background(), h)
	c.state, c.hold, c.cancel = leading, h, cancel
	c.watched = c.watchTerm(lctx, time.Now(), h.Token())
	return lctx, nil
}

// begin starts a campaign: refused while one runs or the candidate leads;
// a leadership already lost is put away first, so that a candidate may
// campaign again after a loss without Resign.
func (c *Candidate) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case campaigning:
		return fmt.Errorf("%w: elect: Campaign(%q): the candidate is already campaigning", locker.ErrInvalidArgument, c.name)
	case leading:
		select {
		case <-c.hold.Lost():
			c.cancel()
			_ = c.hold.Unlock() // ErrLockLost: it only forgets the hold
			if c.watched != nil {
				<-c.watched // the loss is reported before the campaign starts
			}
			c.hold, c.cancel, c.watched = nil, nil, nil
		default:
			return fmt.Errorf("%w: elect: Campaign(%q): the candidate already leads", locker.ErrInvalidArgument, c.name)
		}
	}
	c.state = campaigning
	return nil
}

// win takes the leadership: the lock of name, on an engine where no other
// engine of a switcher has a leader.
func (c *Candidate) win(ctx context.Context) (locker.Handle, error) {
	sw, ok := c.engine.(switcherEngine)
	down := map[string]time.Time{}
	for {
		h, err := c.engine.NewLocker(c.name, locker.WithOwner(c.owner), locker.WithTTL(c.ttl))
		if err != nil {
			return nil, fmt.Errorf("elect: campaign %q: %w", c.name, err)
		}
		if err := h.LockCtx(ctx); err != nil {
			return nil, err
		}
		if !ok {
			return h, nil
		}
		other := c.elsewhere(ctx, sw, h.Engine(), down)
		if other == nil {
			return h, nil
		}
		// Another engine of the switcher has a leader (pinned there since
		// before a switch), or a candidate that will step back as this one
		// does: wait until its hold ends, then campaign again.
		_ = locker.Release(context.Background(), h)
		if err := c.waitOut(ctx, other); err != nil {
			return nil, err
		}
	}
}

// Resign ends the leadership: the leadership context ends and the next
// candidate may win. Without the leadership it returns an error wrapping
// locker.ErrNotHeld; a leadership already lost, one wrapping
// locker.ErrLockLost.
func (c *Candidate) Resign() error {
	c.mu.Lock()
	if c.state != leading {
		c.mu.Unlock()
		return fmt.Errorf("elect: Resign(%q): the candidate does not lead: %w", c.name, locker.ErrNotHeld)
	}
	h, cancel, watched := c.hold, c.cancel, c.watched
	c.state, c.hold, c.cancel, c.watched = idle, nil, nil, nil
	c.mu.Unlock()
	cancel()
	if watched != nil {
		<-watched // the end is reported before Resign returns
	}
	if err := h.Unlock(); err != nil {
		return fmt.Errorf("elect: Resign(%q): %w", c.name, err)
	}
	return nil
}

// Token is the fencing token of the current leadership; 0 without one.
// Through a switcher it orders leaderships across switches (the switch
// epoch is its high part).
func (c *Candidate) Token() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold == nil {
		return 0
	}
	return c.hold.Token()
}
