package driver

import (
	"fmt"
	"unicode/utf8"

	"github.com/orthrus-go/orthrus/locker"
)

// MaxNameLen is the longest lock name, in bytes, that every engine accepts
// once it has escaped the name into a key or path.
const MaxNameLen = 1024

// ValidateName reports whether name can be a lock name: non-empty, valid
// UTF-8, without NUL, at most MaxNameLen bytes. Its errors wrap locker.ErrInvalidName.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: name is empty", locker.ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: name is %d bytes, over the limit of %d", locker.ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name %q is not valid UTF-8", locker.ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%w: name %q contains NUL at byte %d", locker.ErrInvalidName, name, i)
		}
	}
	return nil
}
