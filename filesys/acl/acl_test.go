package acl

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func u(p uint16) Entry             { return Entry{TagUserObj, p, UndefinedID} }
func nu(id uint32, p uint16) Entry { return Entry{TagUser, p, id} }
func g(p uint16) Entry             { return Entry{TagGroupObj, p, UndefinedID} }
func ng(id uint32, p uint16) Entry { return Entry{TagGroup, p, id} }
func m(p uint16) Entry             { return Entry{TagMask, p, UndefinedID} }
func o(p uint16) Entry             { return Entry{TagOther, p, UndefinedID} }

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    ACL
		err  string // "" when valid
	}{
		{"minimal", ACL{u(7), g(5), o(0)}, ""},
		{"minimal with mask", ACL{u(7), g(5), m(5), o(0)}, ""},
		{"named", ACL{u(7), nu(1001, 6), nu(1002, 4), g(5), ng(50, 7), m(7), o(0)}, ""},
		{"empty", ACL{}, "no entries"},
		{"no other", ACL{u(7), g(5)}, "missing"},
		{"no group", ACL{u(7), o(5)}, "out of place"},
		{"two owners", ACL{u(7), u(7), g(5), o(0)}, "out of place"},
		{"named without mask", ACL{u(7), nu(1001, 6), g(5), o(0)}, "out of place"},
		{"unsorted", ACL{u(7), nu(1002, 6), nu(1001, 6), g(5), m(7), o(0)}, "not sorted"},
		{"duplicate user", ACL{u(7), nu(1001, 6), nu(1001, 4), g(5), m(7), o(0)}, "twice"},
		{"duplicate group", ACL{u(7), g(5), ng(9, 6), ng(9, 4), m(7), o(0)}, "twice"},
		{"perm too big", ACL{u(8), g(5), o(0)}, "beyond rwx"},
		{"unknown tag", ACL{u(7), {Tag: 0x40}, g(5), o(0)}, "unknown tag"},
		{"after other", ACL{u(7), g(5), o(0), m(7)}, "out of place"},
		{"mask before group", ACL{u(7), m(7), g(5), o(0)}, "out of place"},
		{"too many", slices.Concat(ACL{u(7)}, users(EntriesMax), ACL{g(5), m(7), o(0)}), "entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.a.Valid()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Valid(%s) = %v", tc.a, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Valid(%s) = %v, want ErrInvalid saying %q", tc.a, err, tc.err)
			}
		})
	}
}

func users(n int) ACL {
	a := make(ACL, n)
	for i := range a {
		a[i] = nu(uint32(i), 4)
	}
	return a
}

func TestDecode(t *testing.T) {
	good := ACL{u(6), nu(1001, 6), g(4), m(6), o(4)}
	b := good.Encode()
	if len(b) != 4+5*8 || !bytes.Equal(b[:4], []byte{2, 0, 0, 0}) {
		t.Fatalf("Encode = % x", b)
	}
	// Byte by byte, as setfacl sends it: user:1001:rw- is tag 2, perm 6, id 1001.
	if !bytes.Equal(b[12:20], []byte{2, 0, 6, 0, 0xe9, 3, 0, 0}) {
		t.Fatalf("named entry encoded as % x", b[12:20])
	}
	a, err := Decode(b)
	if err != nil || !slices.Equal(a, good) {
		t.Fatalf("Decode(Encode(%s)) = %s, %v", good, a, err)
	}
	if a, err := Decode([]byte{2, 0, 0, 0}); err != nil || a == nil || len(a) != 0 {
		t.Fatalf("Decode(header only) = %#v, %v; want empty list", a, err)
	}
	// An id on an unnamed entry is ignored, as the kernel does.
	odd := slices.Clone(b)
	odd[4+4] = 7
	if a, err := Decode(odd); err != nil || a[0].ID != UndefinedID {
		t.Fatalf("Decode with an id on user:: = %v, %v", a, err)
	}
	for name, bad := range map[string][]byte{
		"short":         {2, 0},
		"version 1":     append([]byte{1, 0, 0, 0}, b[4:]...),
		"partial entry": b[:len(b)-3],
		"invalid list":  ACL{u(6), nu(1001, 6), g(4), o(4)}.Encode(),
		"too long":      make([]byte, EncodedMax+8),
	} {
		if _, err := Decode(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

func TestEquivMode(t *testing.T) {
	for _, tc := range []struct {
		a     ACL
		mode  uint32
		want  uint32
		equiv bool
	}{
		{ACL{u(7), g(5), o(1)}, 0o100000, 0o100751, true},
		{ACL{u(7), g(5), o(1)}, 0o104777, 0o104751, true}, // setuid and type kept
		{ACL{u(6), g(4), m(6), o(0)}, 0o100000, 0o100660, false},
		{ACL{u(6), nu(1001, 7), g(4), m(5), o(0)}, 0o100000, 0o100650, false},
	} {
		got, equiv := tc.a.EquivMode(tc.mode)
		if got != tc.want || equiv != tc.equiv {
			t.Errorf("%s.EquivMode(%o) = %o, %v; want %o, %v", tc.a, tc.mode, got, equiv, tc.want, tc.equiv)
		}
	}
	for mode := uint32(0); mode <= 0o777; mode++ {
		if got, equiv := FromMode(mode).EquivMode(0o100000); got != 0o100000|mode || !equiv {
			t.Fatalf("FromMode(%o) is equivalent to %o, %v", mode, got, equiv)
		}
	}
}

func TestPermits(t *testing.T) {
	const owner, group = 100, 50
	a := ACL{u(6), nu(1001, 7), nu(1003, 0), g(4), ng(60, 2), ng(70, 4), m(6), o(1)}
	in := func(gids ...uint32) func(uint32) bool {
		return func(g uint32) bool { return slices.Contains(gids, g) }
	}
	for _, tc := range []struct {
		name string
		uid  uint32
		gids []uint32
		want uint16
		ok   bool
	}{
		{"owner rw", owner, nil, Read | Write, true},
		{"owner x denied by user::", owner, nil, Exec, false},
		{"owner is not other even if other would do", owner, nil, Exec, false},
		{"named user rw", 1001, nil, Read | Write, true},
		{"named user x masked", 1001, nil, Exec, false},
		{"named user with no perms, other would allow", 1003, nil, Exec, false},
		{"file group r", 2000, []uint32{group}, Read, true},
		{"file group w denied", 2000, []uint32{group}, Write, false},
		{"named group w", 2000, []uint32{60}, Write, true},
		{"one matching group grants all", 2000, []uint32{60, 70}, Read, true},
		{"groups are not added together", 2000, []uint32{60, 70}, Read | Write, false},
		{"group member is not other", 2000, []uint32{60}, Exec, false},
		{"other x", 2000, nil, Exec, true},
		{"other r denied", 2000, nil, Read, false},
		{"nothing wanted", 2000, []uint32{60}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Permits(tc.uid, in(tc.gids...), owner, group, tc.want); got != tc.ok {
				t.Fatalf("Permits(uid %d, groups %v, %s) = %v, want %v", tc.uid, tc.gids, PermString(tc.want), got, tc.ok)
			}
		})
	}
	// Without a mask the group entry is not limited.
	if !(ACL{u(0), g(7), o(0)}).Permits(5, in(group), owner, group, 7) {
		t.Fatal("group:: rwx without a mask refused rwx")
	}
}

func TestCreate(t *testing.T) {
	def := ACL{u(7), nu(1001, 7), g(5), m(7), o(5)}
	for _, tc := range []struct {
		name      string
		def       ACL
		mode      uint32
		wantMode  uint32
		access    ACL
		inherited bool
	}{
		{"file 0666", def, 0o100666, 0o100664, ACL{u(6), nu(1001, 7), g(5), m(6), o(4)}, false},
		{"file 0600", def, 0o100600, 0o100600, ACL{u(6), nu(1001, 7), g(5), m(0), o(0)}, false},
		{"dir 0777", def, 0o040777, 0o040775, ACL{u(7), nu(1001, 7), g(5), m(7), o(5)}, true},
		{"dir setgid kept", def, 0o042777, 0o042775, ACL{u(7), nu(1001, 7), g(5), m(7), o(5)}, true},
		{"minimal default", ACL{u(7), g(5), o(0)}, 0o100666, 0o100640, nil, false},
		{"minimal default dir", ACL{u(7), g(5), o(0)}, 0o040777, 0o040750, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.def)
			mode, access, inh := Create(tc.def, tc.mode)
			if mode != tc.wantMode || !slices.Equal(access, tc.access) {
				t.Fatalf("Create(%s, %o) = %o, %s; want %o, %s", tc.def, tc.mode, mode, access, tc.wantMode, tc.access)
			}
			if tc.inherited != (inh != nil) || (inh != nil && !slices.Equal(inh, tc.def)) {
				t.Fatalf("inherited default %s, want %v", inh, tc.inherited)
			}
			if !slices.Equal(tc.def, before) {
				t.Fatalf("Create changed the parent's default to %s", tc.def)
			}
			if access != nil {
				if err := access.Valid(); err != nil {
					t.Fatal(err)
				}
				if m, _ := access.EquivMode(0); m != mode&0o777 {
					t.Fatalf("access list shows mode %o, the file has %o", m, mode&0o777)
				}
			}
		})
	}
}

func TestChmod(t *testing.T) {
	a := ACL{u(6), nu(1001, 7), g(4), m(6), o(4)}
	got := a.Chmod(0o100750)
	want := ACL{u(7), nu(1001, 7), g(4), m(5), o(0)}
	if !slices.Equal(got, want) {
		t.Fatalf("Chmod(0750) = %s, want %s", got, want)
	}
	if a[0].Perm != 6 {
		t.Fatal("Chmod changed its receiver")
	}
	if mode, _ := got.EquivMode(0o100000); mode != 0o100750 {
		t.Fatalf("after chmod 0750 the list shows %o", mode)
	}
	if got := (ACL{u(6), g(4), o(4)}).Chmod(0o751); !slices.Equal(got, ACL{u(7), g(5), o(1)}) {
		t.Fatalf("Chmod without mask = %s", got)
	}
}

func TestString(t *testing.T) {
	a := ACL{u(6), nu(1001, 7), g(4), m(6), o(0)}
	if s := a.String(); s != "user::rw-,user:1001:rwx,group::r--,mask::rw-,other::---" {
		t.Fatal(s)
	}
}
