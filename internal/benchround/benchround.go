// Package benchround orders the implementations a benchmark compares by
// the round of scripts/bench, so that none always runs first: the first
// one runs on the coldest server and machine.
package benchround

import (
	"os"
	"strconv"
)

// Rotate returns names rotated by the round scripts/bench runs
// (ORTHRUS_BENCH_ROUND, from 1), and as they are outside it.
func Rotate[T any](names []T) []T {
	r, err := strconv.Atoi(os.Getenv("ORTHRUS_BENCH_ROUND"))
	if err != nil || r <= 0 || len(names) == 0 {
		return names
	}
	k := r % len(names)
	return append(names[k:len(names):len(names)], names[:k]...)
}
