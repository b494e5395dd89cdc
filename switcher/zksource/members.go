package zksource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

var (
	_ switcher.Announcer = (*Source)(nil)
	_ switcher.Roster    = (*Source)(nil)
)

// membersPath holds one ephemeral node per announced Member, beside the
// watched node rather than under it: a fleet announces itself before its
// first proposal creates the watched node, which must not exist until then.
func (s *Source) membersPath() string { return s.path + ".members" }

// memberPath is the node of one Member: any ID, escaped to one node name.
func (s *Source) memberPath(id string) string {
	return s.membersPath() + "/" + zkconn.EscapeName(id)
}

// Announce implements switcher.Announcer: m goes to an ephemeral node,
// which ends with the session.
func (s *Source) Announce(ctx context.Context, m switcher.Member) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("zksource: announce %q: %w", m.ID, err)
	}
	_, err = zkconn.Call(ctx, func() (struct{}, error) { return struct{}{}, s.announce(m.ID, data) })
	if err != nil {
		return fmt.Errorf("zksource: announce %q: %w: %w", m.ID, locker.ErrUnavailable, err)
	}
	return nil
}

func (s *Source) announce(id string, data []byte) error {
	s.roster.Lock()
	defer s.roster.Unlock()
	s.mu.Lock()
	retracted := s.retracted[id]
	s.mu.Unlock()
	if retracted {
		return nil
	}
	path := s.memberPath(id)
	_, err := s.conn.Set(path, data, -1)
	if !errors.Is(err, gozk.ErrNoNode) {
		return err
	}
	for _, p := range append(zkconn.Ancestors(s.membersPath()), s.membersPath()) {
		if _, err := s.conn.Create(p, nil, 0, s.acl); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	_, err = s.conn.Create(path, data, gozk.FlagEphemeral, s.acl)
	return err
}

// Retract implements switcher.Announcer.
func (s *Source) Retract(ctx context.Context, id string) error {
	s.mu.Lock()
	if s.retracted == nil {
		s.retracted = make(map[string]bool)
	}
	s.retracted[id] = true
	s.mu.Unlock()
	_, err := zkconn.Call(ctx, func() (struct{}, error) {
		s.roster.Lock()
		defer s.roster.Unlock()
		err := s.conn.Delete(s.memberPath(id), -1)
		if errors.Is(err, gozk.ErrNoNode) {
			err = nil
		}
		if err == nil {
			// The last member out removes the members node, so that a fleet
			// that is gone leaves the watched node as it found it.
			if derr := s.conn.Delete(s.membersPath(), -1); derr != nil && !errors.Is(derr, gozk.ErrNotEmpty) && !errors.Is(derr, gozk.ErrNoNode) {
				err = derr
			}
		}
		return struct{}{}, err
	})
	if err != nil {
		return fmt.Errorf("zksource: retract %q: %w: %w", id, locker.ErrUnavailable, err)
	}
	return nil
}

// Members implements switcher.Roster: the Members announced by live
// sessions. A record it cannot decode is skipped.
func (s *Source) Members(ctx context.Context) ([]switcher.Member, error) {
	ms, err := zkconn.Call(ctx, func() ([]switcher.Member, error) {
		names, _, err := s.conn.Children(s.membersPath())
		if errors.Is(err, gozk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		out := make([]switcher.Member, 0, len(names))
		for _, n := range names {
			data, _, err := s.conn.Get(s.membersPath() + "/" + n)
			if errors.Is(err, gozk.ErrNoNode) {
				continue // its session ended meanwhile
			}
			if err != nil {
				return nil, err
			}
			var m switcher.Member
			if err := json.Unmarshal(data, &m); err != nil {
				s.log.Warn("zksource: skipping a member record that does not decode", "node", n, "err", err)
				continue
			}
			out = append(out, m)
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("zksource: members of %q: %w: %w", s.path, locker.ErrUnavailable, err)
	}
	return ms, nil
}
