package config

import (
	"fmt"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/telemetry"
)

// WithMeterProvider reports the engines and the switcher that Open builds
// (and the engines lockctl dials on their own) to OpenTelemetry metrics
// through mp, with package telemetry; spans go to the global tracer
// provider unless WithTracerProvider names one. Default: no instrumentation at all.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *openSettings) error {
		if mp == nil {
			return fmt.Errorf("config: WithMeterProvider: %w: provider is nil", locker.ErrInvalidArgument)
		}
		s.telemetry = append(s.telemetry, telemetry.WithMeterProvider(mp))
		return nil
	}
}

// WithTracerProvider reports the engines and the switcher that Open builds
// to OpenTelemetry traces through tp: a span per acquisition, release,
// lost hold and switch. Metrics go to the global meter provider
// unless WithMeterProvider names one. Default: no instrumentation at all.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *openSettings) error {
		if tp == nil {
			return fmt.Errorf("config: WithTracerProvider: %w: provider is nil", locker.ErrInvalidArgument)
		}
		s.telemetry = append(s.telemetry, telemetry.WithTracerProvider(tp))
		return nil
	}
}

// observer returns the Telemetry the options ask for; nil without any.
func (s *openSettings) observer() (*telemetry.Telemetry, error) {
	if len(s.telemetry) == 0 {
		return nil, nil
	}
	t, err := telemetry.New(s.telemetry...)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return t, nil
}
