package zk

import (
	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
)

// SetBeforeHeavyCreate installs f to run between a heavy arrival's look
// and its create; call it before the engine is used.
func (e *Engine) SetBeforeHeavyCreate(f func()) { e.beforeHeavyCreate = f }

// HeavyTries is how many heavy nodes the engine created, valid or not.
func (e *Engine) HeavyTries() int64 { return e.heavyTries.Load() }

// HeavyData is the data of a heavy node made from a look at a parent of
// stat st that granted the nodes of sequences granted; with stale, as
// if a child was created after the look.
func HeavyData(st *gozk.Stat, stale bool, granted []int64, owner string) []byte {
	next := nextSequence(st)
	if stale {
		next--
	}
	return record{next: next, pczxid: st.Czxid, granted: granted, owner: owner}.encode()
}

// NextSequence is the sequence the next sequential child of a parent of
// stat st gets.
func NextSequence(st *gozk.Stat) int64 { return nextSequence(st) }

// ExtraWrites is the count of writes to a parent of stat st that are not
// a create's.
func ExtraWrites(st *gozk.Stat) int64 { return zkconn.ExtraWrites(st) }
