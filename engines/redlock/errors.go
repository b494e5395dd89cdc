package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/orthrus-go/orthrus/engines/redis"
	"github.com/orthrus-go/orthrus/locker"
)

// errNoAnswer is the failure of the nodes that did not answer at all.
var errNoAnswer = errors.New("no answer")

// unavailable is the error of a request that fewer than a quorum of nodes
// answered (ok of them), with their errors: ErrUnavailable, ErrRefused too
// when every failed node refused the connection, and ErrPermission when a
// node refused the user (its credentials or ACL), which waiting won't cure.
func (e *Engine) unavailable(ctx context.Context, op, name string, ok int, errs []error) error {
	classes := []error{locker.ErrUnavailable}
	silent := len(e.nodes) - ok - len(errs)
	refused, denied := len(errs) > 0 && silent == 0, false
	for _, err := range errs {
		refused = refused && (errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET))
		denied = denied || redis.IsPermission(err)
	}
	if refused {
		classes = append(classes, locker.ErrRefused)
	}
	if denied {
		classes = append(classes, locker.ErrPermission)
	}
	if silent > 0 {
		errs = append(errs, fmt.Errorf("%d nodes: %w within the node timeout (%v)", silent, errNoAnswer, e.timeout))
	}
	cause := fmt.Errorf("%d of %d nodes answered, %d needed: %w", ok, len(e.nodes), e.quorum, nodeErrors(errs))
	if ctx.Err() != nil {
		cause = fmt.Errorf("%w (%w)", cause, ctx.Err())
	}
	return &locker.EngineError{Engine: "redlock", Op: op, Name: name, Classes: classes, Err: cause}
}

// nodeErrors are the failures of several nodes on one line, as errors.Join
// keeps them for errors.Is but without its newlines, which broke the
// tables and log lines that print the error.
type nodeErrors []error

func (n nodeErrors) Error() string {
	msgs := make([]string, len(n))
	for i, err := range n {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (n nodeErrors) Unwrap() []error { return n }
