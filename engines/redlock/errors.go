package redlock

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/orthrus-go/orthrus/locker"
)

// errNoAnswer is the failure of the nodes that did not answer at all.
var errNoAnswer = errors.New("no answer")

// unavailable is the error of a request that fewer than a quorum of nodes
// answered (ok of them), with their errors: ErrUnavailable, and ErrRefused
// too when every failed node refused the connection.
func (e *Engine) unavailable(ctx context.Context, op, name string, ok int, errs []error) error {
	classes := []error{locker.ErrUnavailable}
	silent := len(e.nodes) - ok - len(errs)
	refused := len(errs) > 0 && silent == 0
	for _, err := range errs {
		refused = refused && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET))
	}
	if refused {
		classes = append(classes, locker.ErrRefused)
	}
	if silent > 0 {
		errs = append(errs, fmt.Errorf("%d nodes: %w within the node timeout (%v)", silent, errNoAnswer, e.timeout))
	}
	cause := fmt.Errorf("%d of %d nodes answered, %d needed: %w", ok, len(e.nodes), e.quorum, errors.Join(errs...))
	if ctx.Err() != nil {
		cause = fmt.Errorf("%w (%w)", cause, ctx.Err())
	}
	return &locker.EngineError{Engine: "redlock", Op: op, Name: name, Classes: classes, Err: cause}
}
