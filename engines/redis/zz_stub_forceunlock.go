package redis

import (
	"context"
	"errors"

	"github.com/orthrus-go/orthrus/locker"
)

// TEMP stub, dropped by the lead: the real one is written in parallel.
func (e *Engine) ForceUnlockFamily(context.Context, locker.Kind, string, uint64) ([]locker.FamilyHolder, error) {
	return nil, errors.ErrUnsupported
}
