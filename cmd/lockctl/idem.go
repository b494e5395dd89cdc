package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/orthrus-go/orthrus/cmd/lockctl/internal/cfgops"
	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/idem"
)

const idemSynopsis = "lookup|delete --config FILE --app KEY [--engine ENGINE] [--prefix P] [--yes] (--id HEX | --json DOC | CONTENT)"

const idemExamples = `  lockctl idem lookup --config locks.yaml --app billing order-42
  lockctl idem lookup --config locks.yaml --app billing --json '{"order":"A-17","amount":1200}'
  lockctl idem delete --config locks.yaml --app billing --engine redis-main --yes order-42
`

// idemOpts are the flags of idem lookup and delete.
type idemOpts struct {
	path, app, engine, prefix, idHex, doc string
	yes                                   bool
}

// idemFlags returns the flag set of idem sub ("lookup|delete" for the
// usage of both) and the options it sets.
func idemFlags(sub string, stderr io.Writer) (*cmdFlags, *idemOpts) {
	o := &idemOpts{}
	fs := newFlags("idem "+sub, idemSynopsis[len("lookup|delete "):], idemExamples, stderr)
	fs.StringVar(&o.path, "config", "", "config `FILE`")
	fs.StringVar(&o.app, "app", "", "the application `KEY` the gate uses (required)")
	fs.StringVar(&o.engine, "engine", "", "the `ENGINE` whose store holds the record (default: the config's active engine)")
	fs.StringVar(&o.prefix, "prefix", "", "the store's prefix `P`, as the gate's store has it (default: the store's)")
	fs.StringVar(&o.idHex, "id", "", "the operation ID in `HEX`, instead of its content")
	fs.StringVar(&o.doc, "json", "", "the operation's content as a JSON `DOC` (a map or struct), instead of CONTENT")
	fs.BoolVar(&o.yes, "yes", false, "delete: do not ask for confirmation")
	return fs, o
}

// runIdem looks up or deletes the idempotency record of one operation on
// one engine of the config file, through a store of package idem over a
// client of its own.
func runIdem(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "lookup" && args[0] != "delete") {
		// Without a subcommand, the usage lists the flags both share.
		fs, _ := idemFlags("lookup|delete", stderr)
		fs.Usage()
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return errors.New("want a subcommand: lookup or delete")
	}
	sub := args[0]
	fs, o := idemFlags(sub, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if o.app == "" {
		return errors.New("--app: required, the application key of the gate")
	}
	id, err := operationID(o.app, o.idHex, o.doc, fs.Args())
	if err != nil {
		return err
	}
	cfg, err := loadConfig(o.path)
	if err != nil {
		return err
	}
	e, err := configEngine(cfg, o.engine)
	if err != nil {
		return err
	}
	// DialClient bounds itself by start_timeout; the lookup gets its own.
	store, closeStore, err := openIdemStore(context.Background(), cfg, e.Name, o.prefix)
	if err != nil {
		return err
	}
	defer closeStore()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartTimeout)
	defer cancel()
	gate, err := idem.New(o.app, store, idem.WithRequestTimeout(cfg.StartTimeout))
	if err != nil {
		return err
	}
	rec, entry, err := findRecord(ctx, gate, id, e.Name)
	if err != nil {
		return err
	}
	if sub == "lookup" {
		return printRecord(stdout, e.Name, id, rec, entry)
	}
	return deleteRecord(gate, id, e.Name, rec, o.yes, cfg.StartTimeout, stdout)
}

// findRecord returns the record of operation id, an error when there is
// none.
func findRecord(ctx context.Context, gate *idem.Gate, id idem.ID, engine string) (idem.Record, idem.Entry, error) {
	rec, entry, ok, err := gate.Lookup(ctx, "", id)
	if err != nil {
		return idem.Record{}, idem.Entry{}, err
	}
	if !ok {
		return idem.Record{}, idem.Entry{}, fmt.Errorf("no record of %s on %s", id, engine)
	}
	return rec, entry, nil
}

// deleteRecord deletes rec, the record of operation id, once the operator
// confirms it (or said --yes), within timeout.
func deleteRecord(gate *idem.Gate, id idem.ID, engine string, rec idem.Record, yes bool, timeout time.Duration, stdout io.Writer) error {
	if !yes {
		fmt.Fprintf(stdout, "Delete the %s record of %s on %s? The operation can then run again. [y/N] ", rec.State, id, engine)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return errors.New("not confirmed; nothing deleted")
		}
	}
	// A fresh bound: the operator may have taken a while to answer.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	deleted, err := gate.Forget(ctx, "", id)
	if err != nil {
		return err
	}
	if !deleted {
		return fmt.Errorf("the record of %s on %s was gone already", id, engine)
	}
	fmt.Fprintf(stdout, "deleted the %s record of %s on %s\n", rec.State, id, engine)
	return nil
}

// operationID is the ID of exactly one of --id, --json and CONTENT.
func operationID(app, idHex, doc string, args []string) (idem.ID, error) {
	given := 0
	for _, set := range []bool{idHex != "", doc != "", len(args) > 0} {
		if set {
			given++
		}
	}
	if given != 1 || len(args) > 1 {
		return idem.ID{}, errors.New("want exactly one of --id HEX, --json DOC or one CONTENT argument")
	}
	switch {
	case idHex != "":
		return idem.ParseID(idHex)
	case doc != "":
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber() // numbers keep their text, as the gate hashes them
		var v any
		if err := dec.Decode(&v); err != nil {
			return idem.ID{}, fmt.Errorf("--json: %w", err)
		}
		return idem.Identify(app, v)
	}
	return idem.Identify(app, args[0])
}

func configEngine(cfg *config.Config, name string) (*config.Engine, error) {
	if name == "" {
		name = cfg.Active
	}
	if name == "" && len(cfg.Engines) > 0 {
		name = cfg.Engines[0].Name
	}
	var names []string
	for i := range cfg.Engines {
		if cfg.Engines[i].Name == name {
			return &cfg.Engines[i], nil
		}
		names = append(names, cfg.Engines[i].Name)
	}
	return nil, fmt.Errorf("--engine: unknown engine %q (the config has %s)", name, strings.Join(names, ", "))
}

// openIdemStore dials the engine's server as config dials it for the
// engine (TLS, credentials, Sentinel and timeouts included) and returns a
// store over that client.
func openIdemStore(ctx context.Context, cfg *config.Config, engine, prefix string) (idem.Store, func(), error) {
	c, err := cfgops.DialClient(ctx, cfg, engine, false, quiet())
	if err != nil {
		return nil, nil, err
	}
	opts := []idem.StoreOption{idem.WithName(engine)}
	if prefix != "" {
		opts = append(opts, idem.WithPrefix(prefix))
	}
	var s idem.Store
	closeFn := func() { _ = c.Close() }
	switch {
	case c.Redis != nil:
		s, err = idem.NewRedisStore(c.Redis, opts...)
	case c.Etcd != nil:
		s, err = idem.NewEtcdStore(c.Etcd, opts...)
	case c.ZK != nil:
		var z *idem.ZKStore
		if z, err = idem.NewZKStore(c.ZK, c.ZKACL, opts...); err == nil {
			// The connection first: its end ends the requests Close waits for.
			s, closeFn = z, func() { _ = c.Close(); _ = z.Close() }
		}
	default:
		err = fmt.Errorf("engine %q: no client for type %q", engine, c.Type)
	}
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return s, closeFn, nil
}

func printRecord(w io.Writer, engine string, id idem.ID, rec idem.Record, e idem.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\t%s\n", id)
	fmt.Fprintf(tw, "ENGINE\t%s\n", engine)
	fmt.Fprintf(tw, "STATE\t%s\n", rec.State)
	fmt.Fprintf(tw, "BEGUN\t%s\n", rec.Begun.UTC().Format(time.RFC3339Nano))
	if e.TTL > 0 {
		fmt.Fprintf(tw, "TIME LEFT\t%s\n", e.TTL.Round(time.Millisecond))
	}
	fmt.Fprintf(tw, "ATTEMPT\t%s\n", hex.EncodeToString(rec.Token[:]))
	if len(rec.Fingerprint) > 0 {
		fmt.Fprintf(tw, "FINGERPRINT\t%s\n", hex.EncodeToString(rec.Fingerprint))
	}
	if len(rec.Result) > 0 {
		shown := rec.Result
		if len(shown) > 200 {
			shown = append(bytes.Clone(shown[:200]), "..."...)
		}
		fmt.Fprintf(tw, "RESULT\t%d bytes: %q\n", len(rec.Result), shown)
	}
	return tw.Flush()
}
