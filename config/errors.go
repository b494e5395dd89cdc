package config

import (
	"strings"

	"github.com/orthrus-go/orthrus/locker"
)

// FieldError is one problem with one setting. It wraps
// locker.ErrInvalidArgument.
type FieldError struct {
	// Field is the setting's path as written in the file:
	// "engines[1].type", "lock.ttl"; "" for the top level.
	Field string
	// Msg says what is wrong and what was expected.
	Msg string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Unwrap returns locker.ErrInvalidArgument.
func (e *FieldError) Unwrap() error { return locker.ErrInvalidArgument }

// ValidationError is a configuration that does not decode or validate,
// with every problem found. errors.Is(err, locker.ErrInvalidArgument)
// holds, and errors.As finds the first FieldError.
type ValidationError struct {
	// File is the file loaded, "" for a Config built in code.
	File   string
	Fields []*FieldError
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File + ": ")
	}
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Error())
	}
	return b.String()
}

// Unwrap returns the FieldErrors.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Fields))
	for i, f := range e.Fields {
		errs[i] = f
	}
	return errs
}
