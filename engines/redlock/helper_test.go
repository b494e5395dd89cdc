package redlock_test

import "os"

// helperEnv marks a re-executed test binary that runs a helper process.
const helperEnv = "REDLOCK_TEST_HELPER"

func helperMode() bool { return os.Getenv(helperEnv) != "" }
