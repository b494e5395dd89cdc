package zk

import (
	"context"
	"errors"
	"strconv"

	gozk "github.com/go-zookeeper/zk"

	"github.com/orthrus-go/orthrus/internal/zkconn"
)

// epochsNode holds one node per switcher's epoch record, under the root
// but no lock's node ("%e" is no escape of a name).
const epochsNode = "%epochs"

func (e *Engine) epochPath(fleet string) string {
	return e.root + "/" + epochsNode + "/" + zkconn.EscapeName(fleet)
}

// RecordedEpoch implements switcher.EpochRecord.
func (e *Engine) RecordedEpoch(ctx context.Context, fleet string) (uint64, error) {
	data, err := zkconn.Do(ctx, e.zc, func() ([]byte, error) {
		data, _, err := e.conn.Get(e.epochPath(fleet))
		if errors.Is(err, gozk.ErrNoNode) {
			return []byte("0"), nil
		}
		return data, err
	})
	if err != nil {
		return 0, e.fail("epoch", fleet, err)
	}
	v, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		return 0, e.fail("epoch", fleet, err)
	}
	return v, nil
}

// CompareAndSwapEpoch implements switcher.EpochRecord: the node's version
// makes the compare-and-swap of its value.
func (e *Engine) CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error) {
	path, want := e.epochPath(fleet), strconv.FormatUint(old, 10)
	data := []byte(strconv.FormatUint(epoch, 10))
	swapped, err := zkconn.Do(ctx, e.zc, func() (bool, error) {
		held, st, err := e.conn.Get(path)
		switch {
		case errors.Is(err, gozk.ErrNoNode) && old == 0:
			if _, err := e.conn.Create(e.root+"/"+epochsNode, nil, 0, e.acl); err != nil && !errors.Is(err, gozk.ErrNodeExists) {
				return false, err
			}
			_, err = e.conn.Create(path, data, 0, e.acl)
			if errors.Is(err, gozk.ErrNodeExists) {
				return false, nil
			}
			return err == nil, err
		case errors.Is(err, gozk.ErrNoNode):
			return false, nil
		case err != nil:
			return false, err
		case string(held) != want:
			return false, nil
		}
		_, err = e.conn.Set(path, data, st.Version)
		if errors.Is(err, gozk.ErrBadVersion) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return false, e.fail("epoch", fleet, err)
	}
	return swapped, nil
}
