package redlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/orthrus-go/orthrus/locker/inspect"
)

// majorHolder returns the owner found in most of views, with its highest
// token and least TTL; nil when no view has a hold.
func majorHolder(views []nodeView) *inspect.Holder {
	count := make(map[string]int)
	byOwner := make(map[string]*inspect.Holder)
	var best *inspect.Holder
	for _, v := range views {
		if v.value == "" {
			continue
		}
		tok, owner, _ := strings.Cut(v.value, ":")
		token, _ := strconv.ParseUint(tok, 10, 64)
		h := byOwner[owner]
		if h == nil {
			h = &inspect.Holder{Owner: owner, Token: token, TTL: v.ttl}
			byOwner[owner] = h
		}
		h.Token, h.TTL = max(h.Token, token), min(h.TTL, v.ttl)
		count[owner]++
		if best == nil || count[owner] > count[best.Owner] {
			best = h
		}
	}
	return best
}

// nodeView is what one node has of a name.
type nodeView struct {
	value       string        // "<token>:<owner>", "" when free
	ttl         time.Duration // the value's
	subscribers int           // of the release channel
}

// view reads node i's hold of lock and the subscribers of its channel.
func (e *Engine) view(ctx context.Context, i int, lock string) (nodeView, error) {
	r, err := inspectScript.Run(ctx, e.nodes[i], []string{lock}).Slice()
	if err != nil {
		return nodeView{}, err
	}
	v := nodeView{}
	if len(r) >= 3 {
		v.value, _ = r[1].(string)
		pttl, _ := r[2].(int64)
		v.ttl = time.Duration(max(pttl, 0)) * time.Millisecond
	}
	ch := lock + channelSuffix
	m, err := e.nodes[i].PubSubNumSub(ctx, ch).Result()
	v.subscribers = int(m[ch])
	return v, err
}
