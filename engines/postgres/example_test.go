package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orthrus-go/orthrus/engines/postgres"
	"github.com/orthrus-go/orthrus/locker"
)

func ExampleNew() {
	// The caller owns the pool: DSN, credentials, TLS. dsn is the
	// PostgreSQL started for these examples.
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close() // after the engine

	// The engine makes its schema and tables on first use.
	engine, err := postgres.New(pool, postgres.WithSchema("myapp_locks"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer engine.Close() // releases what is still held; leaves the pool open

	l, err := engine.NewLocker("orders/42", locker.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := l.Lock(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held on", l.Engine(), "with a token:", l.Token() > 0)
	if err := l.Unlock(); err != nil {
		fmt.Println(err)
	}
	// Output: held on postgres with a token: true
}

func ExampleSchemaSQL() {
	// For a role that may not create tables: an administrator runs these,
	// and the engine gets WithoutSchemaCreation.
	lines := strings.Split(postgres.SchemaSQL("app_locks"), "\n")
	fmt.Println(strings.Join(lines[:2], "\n"))
	// Output: CREATE SCHEMA IF NOT EXISTS "app_locks";
	// CREATE SEQUENCE IF NOT EXISTS "app_locks".seq;
}
