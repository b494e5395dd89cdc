package config_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/orthrus-go/orthrus/config"
	"github.com/orthrus-go/orthrus/locker"
)

// exampleFile writes a configuration file for an example and returns its
// path and a function that removes it.
func exampleFile(name, content string) (string, func()) {
	dir, err := os.MkdirTemp("", "orthrus-example")
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		panic(err)
	}
	return path, func() { _ = os.RemoveAll(dir) }
}

func ExampleLoad() {
	path, remove := exampleFile("orthrus.yaml", `
engines:
  - name: redis-main
    type: redis
    addrs: ["10.0.0.5:6379"]
  - name: zk-backup
    type: zk
    servers: ["10.0.0.7:2181"]
lock:
  ttl: 20s
`)
	defer remove()
	// Secrets come from the environment: ORTHRUS_ENGINES_<NAME>_PASSWORD.
	os.Setenv("ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD", "s3cret")
	defer os.Unsetenv("ORTHRUS_ENGINES_REDIS_MAIN_PASSWORD")

	cfg, err := config.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("active:", cfg.Active) // the first engine by default
	fmt.Println("lock ttl:", cfg.Lock.TTL)
	fmt.Println("redis password set:", cfg.Engines[0].Password != "")
	// Output:
	// active: redis-main
	// lock ttl: 20s
	// redis password set: true
}

func ExampleLoad_invalid() {
	path, remove := exampleFile("orthrus.yaml", `
engines:
  - name: redis-main
    type: rediss
    addrs: ["10.0.0.5:6379"]
`)
	defer remove()
	_, err := config.Load(path)
	var ve *config.ValidationError
	if errors.As(err, &ve) {
		for _, f := range ve.Fields {
			fmt.Println(f)
		}
	}
	fmt.Println(errors.Is(err, locker.ErrInvalidArgument))
	// Output:
	// engines[0].type: unknown engine "rediss" (want redis, zk, etcd, postgres, redlock)
	// true
}

func ExampleOpen() {
	// redisAddr and zkAddr are the servers started for these examples.
	path, remove := exampleFile("orthrus.yaml", fmt.Sprintf(`
active: redis-main
engines:
  - {name: redis-main, type: redis, addrs: [%q], prefix: example}
  - {name: zk-backup, type: zk, servers: [%q], prefix: /example}
source:
  type: file   # edit active in this file and the switcher follows
`, redisAddr, zkAddr))
	defer remove()

	cfg, err := config.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sw, err := config.Open(ctx, cfg, config.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sw.Close() // stops the watch, the switcher, the engines and their clients

	l, err := sw.NewLocker("nightly-report") // lock.ttl applies
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := l.LockCtx(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held on", l.Engine())
	if err := l.Unlock(); err != nil {
		fmt.Println(err)
	}
	// Output: held on redis-main
}
