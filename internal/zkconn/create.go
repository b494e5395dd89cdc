package zkconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// Protected is a protected ephemeral sequential node to create, as
// Curator's create().creatingParentContainersIfNeeded().withProtection():
// "<Parent>/_c_<GUID><Suffix><sequence>".
type Protected struct {
	Parent string
	GUID   string
	Suffix string
	Data   []byte
	ACL    []gozk.ACL
	// OnSent, if not nil, is called once the create has been written to
	// a socket, before CreateProtected returns (or not at all), on
	// go-zookeeper's send loop: it must not block. A session's requests
	// are answered in order, so a request sent from it is answered after
	// the create, without waiting for the create's reply.
	OnSent func()
	// Requires are nodes that must all exist for the create to happen,
	// checked in the same transaction: ErrRequiredGone otherwise.
	Requires []string
	// Check, if not nil, may turn a successful create into a failure:
	// tests use it to lose a reply.
	Check func(path string) error
	// Mark writes the parent a second time in the create's transaction:
	// a mark that ExtraWrites counts, which every later look sees.
	Mark bool
}

// ErrRequiredGone is CreateProtected's error when a node of
// Protected.Requires does not exist.
var ErrRequiredGone = errors.New("zkconn: the node the create requires is gone")

// Created is a node CreateProtected made: its path and czxid, and its
// parent's data version right after (-1 when not known), cversion right
// after and czxid (0 when not known), which tells one incarnation of a
// parent from the next.
type Created struct {
	Path      string
	Czxid     int64
	PVersion  int32
	PCversion int32
	PCzxid    int64
}

// ExtraWrites is the number of writes to a parent of stat st beyond the
// one each create of a child makes (CreateProtected, CreateTouching): its
// data version less its creates, which (cversion + children) / 2 counts,
// as a create and a delete of a child each bump the cversion. It grows
// only with the writes that are not a create's: Protected.Mark, or a
// write of the parent's own.
func ExtraWrites(st *gozk.Stat) int64 {
	return int64(st.Version) - (int64(st.Cversion)+int64(st.NumChildren))/2
}

// CreateTouching creates the persistent node path under parent, with an
// empty write to parent in the same transaction, as CreateProtected makes,
// so that ExtraWrites stays the count of writes that are not a create's.
func (c *Conn) CreateTouching(ctx context.Context, parent, path string, data []byte, acl []gozk.ACL) error {
	ops := []any{
		&gozk.CreateRequest{Path: path, Data: data, Acl: acl},
		&gozk.SetDataRequest{Path: parent, Version: -1},
	}
	st, err := Do(ctx, c, func() (*gozk.Stat, error) {
		res, err := c.client.Multi(ops...)
		for _, r := range res {
			if errors.Is(r.Error, gozk.ErrNodeExists) || errors.Is(r.Error, gozk.ErrNoNode) {
				return nil, r.Error
			}
		}
		if err == nil && (len(res) != len(ops) || res[1].Stat == nil) {
			err = fmt.Errorf("unexpected reply to create: %+v", res)
		}
		if err != nil {
			return nil, err
		}
		return res[1].Stat, nil
	})
	if err == nil {
		c.ParentWrote(parent, st.Version)
	}
	return err
}

// CreateProtected creates p's node, and its parent, as a container node,
// and the parent's ancestors, as persistent nodes, when they are missing.
//
// The node is created in one transaction with an empty write to the
// parent: both get the transaction's zxid, so the parent's mzxid in the
// reply is the node's czxid, without another round trip, and the parent's
// version is the one ParentUsed wants.
//
// A create whose reply was lost with the connection may have made the
// node: CreateProtected looks for the node of the guid before trying
// again, so that no orphan stays behind. A create the caller abandoned is
// undone in the background.
func (c *Conn) CreateProtected(ctx context.Context, p Protected) (Created, error) {
	t := newCreateTx(c, p)
	// The steps share one deadline; a context for it is made only for the
	// rare steps that need one (making the parent, finding a lost create).
	deadline := time.Now().Add(c.cfg.ConnectTimeout)
	var step context.Context
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	stepCtx := func() context.Context {
		if step == nil {
			step, cancel = context.WithDeadline(ctx, deadline)
		}
		return step
	}
	backoff := MinBackoff
	// The parent is made at most twice: a process that saw it empty may
	// delete it again between our making it and our create (parents.go).
	madeParent := 0
	if p.OnSent != nil {
		c.wire.expect(p.GUID, p.OnSent)
		defer c.wire.forget(p.GUID)
	}
	for {
		cr, err := Start(c, t.run, t.orphan).WaitUntil(ctx, deadline)
		switch {
		case err == nil, errors.Is(err, ErrRequiredGone):
			return cr, err
		case errors.Is(err, gozk.ErrNoNode) && madeParent < 2:
			madeParent++
			if err := c.EnsureContainer(stepCtx(), p.Parent, p.ACL); err != nil {
				return Created{}, c.GiveUp(ctx, err)
			}
			continue
		case !Retryable(err):
			// An abandoned request (err is ctx's, or the deadline's) is
			// the orphan handler's to undo.
			return Created{}, c.GiveUp(ctx, err)
		}
		// The connection dropped: the node may exist.
		path, st, lerr := c.FindProtectedStat(stepCtx(), p.Parent, p.GUID)
		switch {
		case lerr != nil:
			return Created{}, c.GiveUp(ctx, lerr)
		case path != "":
			return Created{Path: path, Czxid: st.Czxid, PVersion: -1}, nil
		case ctx.Err() != nil, !time.Now().Before(deadline):
			return Created{}, c.stepErr(ctx, err)
		}
		if perr := c.pause(ctx, deadline, &backoff, c.Up()); perr != nil {
			return Created{}, c.stepErr(ctx, err)
		}
	}
}

// createTx is the create transaction of one Protected, its requests in
// one allocation: it is every acquisition's first request.
type createTx struct {
	c      *Conn
	parent string
	guid   string
	check  func(string) error
	create gozk.CreateRequest
	touch  gozk.SetDataRequest
	exists gozk.CheckVersionRequest
	nreq   int // the checks of Requires, first in ops
	buf    [3]any
	ops    []any
}

func newCreateTx(c *Conn, p Protected) *createTx {
	t := &createTx{c: c, parent: p.Parent, guid: p.GUID, check: p.Check}
	t.create = gozk.CreateRequest{Path: p.Parent + "/" + ProtectedPrefix + p.GUID + p.Suffix, Data: p.Data, Acl: p.ACL, Flags: gozk.FlagEphemeral | gozk.FlagSequence}
	t.touch = gozk.SetDataRequest{Path: p.Parent, Data: nil, Version: -1}
	t.ops = t.buf[:0]
	switch len(p.Requires) {
	case 0:
	case 1:
		t.exists = gozk.CheckVersionRequest{Path: p.Requires[0], Version: -1}
		t.ops = append(t.ops, &t.exists)
	default:
		t.ops = make([]any, 0, len(p.Requires)+2)
		for _, r := range p.Requires {
			t.ops = append(t.ops, &gozk.CheckVersionRequest{Path: r, Version: -1})
		}
	}
	t.nreq = len(p.Requires)
	if p.Mark {
		t.ops = append(t.ops, &gozk.SetDataRequest{Path: p.Parent, Version: -1})
	}
	t.ops = append(t.ops, &t.create, &t.touch)
	return t
}

// run runs the transaction once.
func (t *createTx) run() (Created, error) { return t.c.multi(t.ops, t.nreq, t.check) }

// orphan undoes a create its caller abandoned.
func (t *createTx) orphan(cr Created, err error) {
	switch {
	case err == nil:
		t.c.Reap(cr.Path)
	case Retryable(err):
		t.c.ReapProtected(t.parent, t.guid)
	}
}

// multi runs the create transaction once; ops end with the create and the
// parent's write, after nreq existence checks (and a mark).
func (c *Conn) multi(ops []any, nreq int, check func(string) error) (Created, error) {
	res, err := c.client.Multi(ops...)
	if err != nil && nreq > 0 && slices.ContainsFunc(res[:min(nreq, len(res))], func(r gozk.MultiResponse) bool { return errors.Is(r.Error, gozk.ErrNoNode) }) {
		return Created{}, ErrRequiredGone
	}
	if err != nil {
		return Created{}, err
	}
	if len(res) != len(ops) || res[len(ops)-1].Stat == nil {
		return Created{}, fmt.Errorf("unexpected reply to create: %+v", res)
	}
	last := res[len(ops)-1].Stat
	cr := Created{Path: res[len(ops)-2].String, Czxid: last.Mzxid, PVersion: last.Version, PCversion: last.Cversion, PCzxid: last.Czxid}
	if check != nil {
		if err := check(cr.Path); err != nil {
			return Created{}, err
		}
	}
	return cr, nil
}

// EnsureContainer creates parent as a container node, which the server
// deletes once its last child is gone, and its missing ancestors as
// persistent nodes.
func (c *Conn) EnsureContainer(ctx context.Context, parent string, acl []gozk.ACL) error {
	mk := func(path string, flags int32) error {
		_, err := Do(ctx, c, func() (string, error) {
			if flags == gozk.FlagContainer {
				return c.client.CreateContainer(path, nil, flags, acl)
			}
			return c.client.Create(path, nil, flags, acl)
		})
		if errors.Is(err, gozk.ErrNodeExists) {
			return nil
		}
		return err
	}
	err := mk(parent, gozk.FlagContainer)
	if !errors.Is(err, gozk.ErrNoNode) {
		return err
	}
	for _, p := range Ancestors(parent) {
		if err := mk(p, gozk.FlagPersistent); err != nil {
			return err
		}
	}
	return mk(parent, gozk.FlagContainer)
}
