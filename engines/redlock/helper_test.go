package redlock_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orthrus-go/orthrus/engines/redlock"
	"github.com/orthrus-go/orthrus/locker"
)

// helperEnv marks a re-executed test binary that runs a helper process.
const helperEnv = "REDLOCK_TEST_HELPER"

func helperMode() bool { return os.Getenv(helperEnv) != "" }

func newQuietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// pausedHolderHelper is the holder process of TestPausedHolder: it takes
// the name, says "held <token>", and once told "go" (after its thaw) says
// "lost 1" if its Lost closes within the TTL ("lost 0" if not) and then
// "write <token>", the write it would make.
func pausedHolderHelper(t *testing.T) {
	e, err := redlock.New(clients(t, strings.Split(os.Getenv(helperEnv), ",")), redlock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, _ := e.NewLocker(os.Getenv("REDLOCK_TEST_NAME"), locker.WithTTL(scenarioTTL))
	if err := l.Lock(); err != nil {
		t.Fatal(err)
	}
	token := l.Token() // Token is 0 once the hold is lost
	fmt.Printf("held %d\n", token)
	in := bufio.NewScanner(os.Stdin)
	in.Scan()
	gone := 0
	select {
	case <-l.Lost():
		gone = 1
	case <-time.After(scenarioTTL):
	}
	fmt.Printf("lost %d\nwrite %d\n", gone, token)
}
