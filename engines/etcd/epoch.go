package etcd

import (
	"context"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// epochKey holds a switcher's epoch record: "<prefix>/%epochs/<fleet>",
// in the engine's range but no lock's ("%e" is no escape of a name).
func (e *Engine) epochKey(fleet string) string {
	return e.prefix + epochsSegment + nameEscaper.Replace(fleet)
}

const epochsSegment = "/%epochs/"

// RecordedEpoch implements switcher.EpochRecord.
func (e *Engine) RecordedEpoch(ctx context.Context, fleet string) (uint64, error) {
	rctx, cancel := e.bound(ctx)
	defer cancel()
	resp, err := e.client.Get(rctx, e.epochKey(fleet))
	if err != nil {
		return 0, e.fail("epoch", fleet, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, e.fail("epoch", fleet, err)
	}
	return v, nil
}

// CompareAndSwapEpoch implements switcher.EpochRecord.
func (e *Engine) CompareAndSwapEpoch(ctx context.Context, fleet string, old, epoch uint64) (bool, error) {
	key := e.epochKey(fleet)
	holds := clientv3.Compare(clientv3.Value(key), "=", strconv.FormatUint(old, 10))
	if old == 0 {
		holds = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	rctx, cancel := e.bound(ctx)
	defer cancel()
	resp, err := e.client.Txn(rctx).If(holds).Then(clientv3.OpPut(key, strconv.FormatUint(epoch, 10))).Commit()
	if err != nil {
		return false, e.fail("epoch", fleet, err)
	}
	return resp.Succeeded, nil
}
