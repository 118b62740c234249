package acl

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode: Decode never panics, refuses with ErrInvalid, and what it
// accepts is Valid and round-trips; the algebra keeps lists Valid and
// agrees with the mode.
func FuzzDecode(f *testing.F) {
	f.Add(ACL{u(6), nu(1001, 7), g(4), m(6), o(4)}.Encode())
	f.Add(ACL{u(7), g(5), o(5)}.Encode())
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 1, 0, 7, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v is not ErrInvalid", err)
			}
			return
		}
		if len(a) == 0 {
			return
		}
		if err := a.Valid(); err != nil {
			t.Fatalf("Decode accepted %s: %v", a, err)
		}
		enc := a.Encode()
		if a2, err := Decode(enc); err != nil || !bytes.Equal(a2.Encode(), enc) {
			t.Fatalf("round trip of %s: %s, %v", a, a2, err)
		}
		for _, mode := range []uint32{0o100644, 0o040777, 0o100000} {
			newMode, access, _ := Create(a, mode)
			if access != nil {
				if err := access.Valid(); err != nil {
					t.Fatalf("Create(%s, %o) made %s: %v", a, mode, access, err)
				}
				if got, _ := access.EquivMode(0); got != newMode&0o777 {
					t.Fatalf("Create(%s, %o): list shows %o, mode %o", a, mode, got, newMode)
				}
			} else if _, equiv := a.EquivMode(0); !equiv {
				t.Fatalf("Create(%s, %o) dropped a list with named entries", a, mode)
			}
			c := a.Chmod(mode)
			if err := c.Valid(); err != nil {
				t.Fatalf("Chmod(%o) of %s made %s: %v", mode, a, c, err)
			}
			if got, _ := c.EquivMode(0); got != mode&0o777 {
				t.Fatalf("Chmod(%o) of %s shows %o", mode, a, got)
			}
		}
	})
}
