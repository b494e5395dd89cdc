package etcd

import (
	"context"
	"errors"

	"github.com/orthrus-go/orthrus/locker"
)

// ForceUnlockFamily is a TEMP stub so that the package compiles while
// another branch implements it. Drop this file when merging.
func (e *Engine) ForceUnlockFamily(ctx context.Context, kind locker.Kind, name string, token uint64) ([]locker.FamilyHolder, error) {
	return nil, errors.ErrUnsupported
}
