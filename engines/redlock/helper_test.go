package redlock_test

import (
	"io"
	"log/slog"
	"os"
)

// helperEnv marks a re-executed test binary that runs a helper process.
const helperEnv = "REDLOCK_TEST_HELPER"

func helperMode() bool { return os.Getenv(helperEnv) != "" }

func newQuietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
