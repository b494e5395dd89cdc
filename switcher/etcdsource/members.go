package etcdsource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/switcher"
)

// memberTTL is the lease of an announced Member, in seconds: three
// announcement periods, so that a live process never loses it and a dead
// one leaves the roster within it.
const memberTTL = 15

var (
	_ switcher.Announcer = (*Source)(nil)
	_ switcher.Roster    = (*Source)(nil)
)

// membersPrefix holds one key per announced Member, beside the watched key
// (which is watched alone, so they never reach Watch).
func (s *Source) membersPrefix() string { return s.key + "/members/" }

// Announce implements switcher.Announcer: it puts m under the key's
// members prefix on a lease that this call keeps alive.
func (s *Source) Announce(ctx context.Context, m switcher.Member) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("etcdsource: announce %q: %w", m.ID, err)
	}
	lease, err := s.memberLease(ctx)
	if err == nil {
		_, err = s.client.Put(ctx, s.membersPrefix()+m.ID, string(data), clientv3.WithLease(lease))
	}
	if err != nil {
		return fmt.Errorf("etcdsource: announce %q: %w: %w", m.ID, locker.ErrUnavailable, err)
	}
	return nil
}

// memberLease returns the source's member lease, renewed, or a new one
// when it has ended.
func (s *Source) memberLease(ctx context.Context) (clientv3.LeaseID, error) {
	s.amu.Lock()
	defer s.amu.Unlock()
	if s.lease != clientv3.NoLease {
		_, err := s.client.KeepAliveOnce(ctx, s.lease)
		if err == nil {
			return s.lease, nil
		}
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return clientv3.NoLease, err
		}
	}
	g, err := s.client.Grant(ctx, memberTTL)
	if err != nil {
		return clientv3.NoLease, err
	}
	s.lease = g.ID
	return s.lease, nil
}

// Retract implements switcher.Announcer.
func (s *Source) Retract(ctx context.Context, id string) error {
	if _, err := s.client.Delete(ctx, s.membersPrefix()+id); err != nil {
		return fmt.Errorf("etcdsource: retract %q: %w: %w", id, locker.ErrUnavailable, err)
	}
	return nil
}

// Members implements switcher.Roster: the Members announced and alive.
// A record it cannot decode is skipped.
func (s *Source) Members(ctx context.Context) ([]switcher.Member, error) {
	resp, err := s.client.Get(ctx, s.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcdsource: members of %q: %w: %w", s.key, locker.ErrUnavailable, err)
	}
	out := make([]switcher.Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var m switcher.Member
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			s.log.Warn("etcdsource: skipping a member record that does not decode", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}
