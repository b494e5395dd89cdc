package redis

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts live in lua/, one file each, with the fragments they share
// written once and put in front of them by newScript. Replies are integers
// where they can be: go-redis reads them without allocating.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// refreshEvery is how many tokens apart fence.lua moves the counter's
// expiry.
const refreshEvery = 256

// luaScript is a script the engine runs by its SHA (EVALSHA), with its
// body kept for a server that lacks it: that one command goes again as
// EVAL, to the node that serves its keys, which caches the script too.
// SCRIPT LOAD would not do: a ClusterClient sends it to every master and
// fails if one of them is down. Argument lists point to sha, so that
// building one boxes nothing.
type luaScript struct {
	src, sha string
}

// newScript joins the files of lua/ named by parts, the fragments first,
// into one script.
func newScript(parts ...string) *luaScript { return scriptOf(Lua(parts...)) }

// Lua returns the sources of the files of lua/ named by parts (without
// ".lua"), joined in that order: the scripts' primitives, for the Redlock
// engine (engines/redlock) to build its per-node scripts on, not to copy.
func Lua(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		src, err := luaFiles.ReadFile("lua/" + p + ".lua")
		if err != nil {
			panic(err) // a name not embedded: no test would pass
		}
		b.Write(src)
	}
	return b.String()
}

func scriptOf(src string) *luaScript {
	sum := sha1.Sum([]byte(src))
	return &luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// run runs s on keys with args, for the calls that are not on a lock's
// hot path (operators, epochs).
func (s *luaScript) run(ctx context.Context, c goredis.UniversalClient, keys []string, args ...any) *goredis.Cmd {
	all := make([]any, 0, 3+len(keys)+len(args))
	all = append(all, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	return evalsha(ctx, c, s, goredis.NewCmd, append(all, args...))
}

// eval turns the arguments of an EVALSHA of s into those of an EVAL.
func (s *luaScript) eval(args []any) []any {
	return append([]any{"eval", s.src}, args[2:]...)
}

// evalsha runs s by its SHA with args (EVALSHA, the SHA, numkeys, ...) as a
// command made by newCmd. A server that lacks the script (it restarted,
// was flushed, or never ran it) gets this one command again as EVAL.
func evalsha[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, s *luaScript, newCmd func(context.Context, ...any) C, args []any) C {
	cmd := newCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	if noScript(cmd.Err()) {
		cmd = newCmd(ctx, s.eval(args)...)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// evalshaEach runs every command of cmds, the EVALSHA of script(i) made by
// newCmd, in one pipeline, and those whose server lacked their script
// again as EVAL, in a second: each command on its own, whatever the others
// answered.
func evalshaEach[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, script func(int) *luaScript, newCmd func(context.Context, ...any) C, cmds []C) {
	pipeline := func(cmds []C) {
		_, _ = c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, cmd := range cmds {
				_ = p.Process(ctx, cmd)
			}
			return nil
		})
	}
	pipeline(cmds)
	var again []C
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			cmds[i] = newCmd(ctx, script(i).eval(cmd.Args())...)
			again = append(again, cmds[i])
		}
	}
	if len(again) > 0 {
		pipeline(again)
	}
}

// evalshaAll is evalshaEach with one script for every command.
func evalshaAll[C goredis.Cmder](ctx context.Context, c goredis.UniversalClient, s *luaScript, newCmd func(context.Context, ...any) C, cmds []C) {
	evalshaEach(ctx, c, func(int) *luaScript { return s }, newCmd, cmds)
}

func noScript(err error) bool { return err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") }
