package driver_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/orthrus-go/orthrus/locker"
	"github.com/orthrus-go/orthrus/locker/driver"
)

func ExampleValidateName() {
	for _, name := range []string{"orders/42", ""} {
		err := driver.ValidateName(name)
		fmt.Printf("%q: %v, invalid name: %v\n", name, err, errors.Is(err, locker.ErrInvalidName))
	}
	// Output:
	// "orders/42": <nil>, invalid name: false
	// "": locker: invalid lock name: name is empty, invalid name: true
}

func ExampleResolve() {
	s, err := driver.Resolve(locker.WithLease(10*time.Second), locker.WithOwner("nightly-report"))
	fmt.Println(s.TTL, s.Renew, s.Owner, err)

	_, err = driver.Resolve(locker.WithTTL(0))
	fmt.Println(err)
	// Output:
	// 10s false nightly-report <nil>
	// locker: invalid argument: WithTTL(0s): ttl must be positive
}
