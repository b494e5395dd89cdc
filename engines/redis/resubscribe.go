package redis

import (
	"context"
	"strings"
	"time"
)

// dropped handles the unsubscription of the channel ch of conn: ours, when
// its last waiter left (leave), or the server's own when the channel's
// slot moved to another master: Redis Cluster then drops the slot's shard
// channels. The waiters of a dropped channel would miss every release from
// then on: it is subscribed again on the master that serves it now, in the
// background, and its waiters try again once it is (confirm wakes them:
// a release may have come in between).
func (h *hub) dropped(conn *subConn, ch string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.channels[strings.TrimSuffix(ch, channelSuffix)]
	// leave removes a channel before it unsubscribes it; a channel
	// subscribed again since then is confirmed after this message.
	if h.closed || h.cluster == nil || c == nil || c.conn != conn || c.confirm == 0 {
		return
	}
	h.wg.Add(1)
	go h.resubscribe(c, conn.addr)
}

// resubscribe subscribes c again on the master that serves it, once the
// client's slot map says it moved from the node at from; it gives up after
// confirmTimeout, and its waiters go on with their expiry timers. It polls:
// the map is reloaded in the background, and nothing says when that is done.
func (h *hub) resubscribe(c *channel, from string) {
	defer h.wg.Done()
	for deadline := time.Now().Add(confirmTimeout); time.Now().Before(deadline); {
		h.cluster.ReloadState(context.Background())
		if !h.pause(50 * time.Millisecond) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
		master, err := h.cluster.MasterForKey(ctx, c.name)
		cancel()
		if err != nil || master.Options().Addr == from {
			continue
		}
		h.mu.Lock()
		if h.closed || h.channels[c.key] != c {
			h.mu.Unlock()
			return // its waiters left meanwhile
		}
		ctx, cancel = context.WithTimeout(context.Background(), confirmTimeout)
		conn, err := h.connFor(ctx, c.name)
		if err == nil {
			err = conn.subscribe(ctx, c.name)
		}
		cancel()
		if err == nil {
			c.conn = conn
		}
		h.mu.Unlock()
		if err == nil {
			return
		}
	}
	h.log.Warn("redis: a moved wake-up channel could not be subscribed again; its waiters wait on expiry alone", "channel", c.name)
	h.mu.Lock()
	wakeAll(c)
	h.mu.Unlock()
}
