package mem

import (
	"fmt"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/observe"
)

// WithObserver reports the engine's acquisitions, releases, renewals and
// holds to o, for metrics and traces (package telemetry implements it with
// OpenTelemetry). Default: none, and no observation cost.
func WithObserver(o observe.Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("mem: WithObserver: %w: observer is nil", locker.ErrInvalidArgument)
		}
		s.observer = o
		return nil
	}
}
