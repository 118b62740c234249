// Package prom holds the registration rules every Plumeria metric follows
// (docs/operations.md, Metrics): a collector goes to the registry the
// caller configured, or to prometheus.DefaultRegisterer, and registering it
// again in the same process is not an error. It knows no metric itself.
package prom

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Registerer returns r, or prometheus.DefaultRegisterer when r is nil.
func Registerer(r prometheus.Registerer) prometheus.Registerer {
	if r == nil {
		return prometheus.DefaultRegisterer
	}
	return r
}

// Shared registers c with r (nil: the default registry) and returns it,
// or returns the equal collector registered before: a second volume
// client, mount or file system in one process adds to the same series.
// A collector that clashes with a different one of the same name is a
// bug, and panics.
func Shared[C prometheus.Collector](r prometheus.Registerer, c C) C {
	err := Registerer(r).Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if e, ok := are.ExistingCollector.(C); ok {
			return e
		}
	}
	panic(fmt.Sprintf("prom: register %T: %v", c, err))
}

// Replace registers c with r (nil: the default registry), replacing an
// equal collector registered before: the series of a role restarted under
// the same name in one process come from its newest incarnation.
func Replace(r prometheus.Registerer, c prometheus.Collector) error {
	r = Registerer(r)
	err := r.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		r.Unregister(are.ExistingCollector)
		err = r.Register(c)
	}
	return err
}
