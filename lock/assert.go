package lock

import "fmt"

// fail panics: an internal invariant is broken, which is a bug in this
// package. Bad input never gets here; it gets an error or a Reject. Call
// sites test the invariant first (if !cond { fail(...) }) so the arguments
// are only boxed when it fails.
func fail(format string, args ...any) {
	panic(fmt.Sprintf("lock: invariant broken: "+format, args...))
}
