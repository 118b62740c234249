package filesys

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// Ids in the tests: uid 10 owns files in group 20; uid 11 is in group 20
// (primary) and uid 12 through a supplementary group; uid 13 is in
// neither.
var (
	asRoot     = Caller{Uid: 0, Gid: 0}
	asOwner    = Caller{Uid: 10, Gid: 20}
	asMember   = Caller{Uid: 11, Gid: 20}
	asSuppl    = Caller{Uid: 12, Gid: 30, Groups: []uint32{31, 20}}
	asStranger = Caller{Uid: 13, Gid: 30, Groups: []uint32{31}}
)

func regAttr(mode uint32) Attr {
	return Attr{Ino: 100, Mode: syscall.S_IFREG | mode, Uid: 10, Gid: 20}
}

func dirAttr(mode uint32) Attr {
	return Attr{Ino: 200, Mode: syscall.S_IFDIR | mode, Uid: 10, Gid: 20}
}

func TestCallerInGroup(t *testing.T) {
	tests := []struct {
		name string
		c    Caller
		gid  uint32
		want bool
	}{
		{"primary", asMember, 20, true},
		{"supplementary first", asSuppl, 31, true},
		{"supplementary last", asSuppl, 20, true},
		{"neither", asStranger, 20, false},
		{"nil groups", asOwner, 31, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.InGroup(tt.gid); got != tt.want {
				t.Errorf("uid %d InGroup(%d) = %v, want %v", tt.c.Uid, tt.gid, got, tt.want)
			}
		})
	}
}

func TestPermits(t *testing.T) {
	tests := []struct {
		name string
		c    Caller
		a    Attr
		want uint32
		ok   bool
	}{
		{"owner reads rw-", asOwner, regAttr(0o600), MayRead, true},
		{"owner writes rw-", asOwner, regAttr(0o600), MayWrite, true},
		{"owner reads and writes rw-", asOwner, regAttr(0o600), MayRead | MayWrite, true},
		{"owner may not exec rw-", asOwner, regAttr(0o600), MayExec, false},
		{"owner execs r-x", asOwner, regAttr(0o500), MayRead | MayExec, true},
		{"owner bits only, though group and other allow", asOwner, regAttr(0o077), MayRead, false},
		{"nothing wanted", asStranger, regAttr(0o000), 0, true},

		{"group reads r--", asMember, regAttr(0o640), MayRead, true},
		{"group may not write r--", asMember, regAttr(0o640), MayWrite, false},
		{"supplementary group reads", asSuppl, regAttr(0o640), MayRead, true},
		{"supplementary group may not write", asSuppl, regAttr(0o640), MayWrite, false},
		{"group bits only, though other allows", asMember, regAttr(0o604), MayRead, false},
		{"supplementary group bits only", asSuppl, regAttr(0o604), MayRead, false},

		{"other reads r--", asStranger, regAttr(0o644), MayRead, true},
		{"other may not write r--", asStranger, regAttr(0o644), MayWrite, false},
		{"other gets no group bits", asStranger, regAttr(0o640), MayRead, false},
		{"other searches --x dir", asStranger, dirAttr(0o711), MayExec, true},
		{"other may not list --x dir", asStranger, dirAttr(0o711), MayRead, false},
		{"other may not create in r-x dir", asStranger, dirAttr(0o755), MayWrite | MayExec, false},
		{"other creates in rwx dir", asStranger, dirAttr(0o777), MayWrite | MayExec, true},

		{"root reads ---", asRoot, regAttr(0o000), MayRead, true},
		{"root writes ---", asRoot, regAttr(0o000), MayWrite, true},
		{"root may not exec file without x", asRoot, regAttr(0o666), MayExec, false},
		{"root may not read and exec file without x", asRoot, regAttr(0o666), MayRead | MayExec, false},
		{"root execs file with owner x only", asRoot, regAttr(0o100), MayExec, true},
		{"root execs file with other x only", asRoot, regAttr(0o001), MayRead | MayExec, true},
		{"root searches --- dir", asRoot, dirAttr(0o000), MayExec, true},
		{"root writes in --- dir", asRoot, dirAttr(0o000), MayWrite | MayExec, true},
		{"root lists --- dir", asRoot, dirAttr(0o000), MayRead, true},
		{"gid 0 is no root", Caller{Uid: 13, Gid: 0}, regAttr(0o000), MayRead, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Permits(tt.a, tt.want); got != tt.ok {
				t.Errorf("uid %d Permits(mode %o, want %s) = %v, want %v",
					tt.c.Uid, tt.a.Mode, accessVerb(tt.want), got, tt.ok)
			}
			err := tt.c.CheckAccess(tt.a, tt.want)
			if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrAccess) {
				t.Errorf("CheckAccess = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestMayDelete(t *testing.T) {
	victim := Attr{Ino: 300, Mode: syscall.S_IFREG | 0o644, Uid: 12, Gid: 30}
	tests := []struct {
		name string
		c    Caller
		dir  Attr
		err  error
	}{
		{"owner of rwx dir", asOwner, dirAttr(0o755), nil},
		{"other in r-x dir", asStranger, dirAttr(0o755), ErrAccess},
		{"group without search", asMember, dirAttr(0o765), ErrAccess},
		{"group in rwx dir", asMember, dirAttr(0o775), nil},
		{"anyone in rwxrwxrwx dir", asStranger, dirAttr(0o777), nil},
		{"root in --- dir", asRoot, dirAttr(0o000), nil},

		{"sticky: stranger", asStranger, dirAttr(0o1777), ErrNotPermitted},
		{"sticky: group member", asMember, dirAttr(0o1777), ErrNotPermitted},
		{"sticky: victim's owner", asSuppl, dirAttr(0o1777), nil},
		{"sticky: dir's owner", asOwner, dirAttr(0o1777), nil},
		{"sticky: root", asRoot, dirAttr(0o1777), nil},
		{"sticky: victim's owner without write", asSuppl, dirAttr(0o1755), ErrAccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.MayDelete(tt.dir, victim)
			if tt.err == nil && err != nil || !errors.Is(err, tt.err) {
				t.Errorf("uid %d MayDelete(dir mode %o) = %v, want %v", tt.c.Uid, tt.dir.Mode, err, tt.err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestCheckSetattr(t *testing.T) {
	when := ptr(time.Unix(1e9, 0))
	tests := []struct {
		name string
		c    Caller
		a    Attr
		set  SetAttr
		err  error
		mode uint32 // the Mode returned, when set has one
		kill bool   // KillPriv returned
	}{
		{name: "nothing", c: asStranger, a: regAttr(0o000)},

		{name: "chmod by owner", c: asOwner, a: regAttr(0o644), set: SetAttr{Mode: ptr[uint32](0o600)}, mode: 0o600},
		{name: "chmod by root", c: asRoot, a: regAttr(0o644), set: SetAttr{Mode: ptr[uint32](0o600)}, mode: 0o600},
		{name: "chmod by writer", c: asStranger, a: regAttr(0o666), set: SetAttr{Mode: ptr[uint32](0o600)}, err: ErrNotPermitted},
		{name: "chmod by group", c: asMember, a: regAttr(0o664), set: SetAttr{Mode: ptr[uint32](0o600)}, err: ErrNotPermitted},
		{name: "setgid kept in own group", c: asOwner, a: regAttr(0o755), set: SetAttr{Mode: ptr[uint32](0o2755)}, mode: 0o2755},
		{name: "setgid cleared outside group", c: Caller{Uid: 10, Gid: 30}, a: regAttr(0o755), set: SetAttr{Mode: ptr[uint32](0o6755)}, mode: 0o4755},
		{name: "setgid kept in supplementary group", c: Caller{Uid: 10, Gid: 30, Groups: []uint32{20}}, a: regAttr(0o755), set: SetAttr{Mode: ptr[uint32](0o2755)}, mode: 0o2755},
		{name: "setgid kept by root outside group", c: asRoot, a: regAttr(0o755), set: SetAttr{Mode: ptr[uint32](0o2755)}, mode: 0o2755},
		{name: "setgid kept: chgrp to own group in the same call", c: Caller{Uid: 10, Gid: 30}, a: regAttr(0o755),
			set: SetAttr{Mode: ptr[uint32](0o2755), Gid: ptr[uint32](30)}, mode: 0o2755, kill: true},
		{name: "setgid kept: chgrp to supplementary group in the same call", c: Caller{Uid: 10, Gid: 30, Groups: []uint32{20}}, a: regAttr(0o755),
			set: SetAttr{Mode: ptr[uint32](0o2755), Gid: ptr[uint32](20)}, mode: 0o2755, kill: true},
		{name: "setgid cleared on a dir too", c: Caller{Uid: 10, Gid: 30}, a: dirAttr(0o755), set: SetAttr{Mode: ptr[uint32](0o2755)}, mode: 0o755},

		{name: "chown by root", c: asRoot, a: regAttr(0o4755), set: SetAttr{Uid: ptr[uint32](13)}, kill: true},
		{name: "chown of a dir by root", c: asRoot, a: dirAttr(0o755), set: SetAttr{Uid: ptr[uint32](13)}},
		{name: "chown by owner to another", c: asOwner, a: regAttr(0o644), set: SetAttr{Uid: ptr[uint32](13)}, err: ErrNotPermitted},
		{name: "chown by owner to itself", c: asOwner, a: regAttr(0o644), set: SetAttr{Uid: ptr[uint32](10)}, kill: true},
		{name: "chown by other to the owner", c: asStranger, a: regAttr(0o666), set: SetAttr{Uid: ptr[uint32](10)}, err: ErrNotPermitted},
		{name: "chown by other to itself", c: asStranger, a: regAttr(0o666), set: SetAttr{Uid: ptr[uint32](13)}, err: ErrNotPermitted},

		{name: "chgrp by root", c: asRoot, a: regAttr(0o644), set: SetAttr{Gid: ptr[uint32](99)}, kill: true},
		{name: "chgrp by owner to primary group", c: Caller{Uid: 10, Gid: 30}, a: regAttr(0o644), set: SetAttr{Gid: ptr[uint32](30)}, kill: true},
		{name: "chgrp by owner to supplementary group", c: Caller{Uid: 10, Gid: 30, Groups: []uint32{31}}, a: regAttr(0o644),
			set: SetAttr{Gid: ptr[uint32](31)}, kill: true},
		{name: "chgrp by owner to the file's group, outside it", c: Caller{Uid: 10, Gid: 30}, a: regAttr(0o644), set: SetAttr{Gid: ptr[uint32](20)}, kill: true},
		{name: "chgrp by owner to a foreign group", c: asOwner, a: regAttr(0o644), set: SetAttr{Gid: ptr[uint32](31)}, err: ErrNotPermitted},
		{name: "chgrp by member to own group", c: asMember, a: regAttr(0o664), set: SetAttr{Gid: ptr[uint32](20)}, err: ErrNotPermitted},
		{name: "chgrp of a dir by owner", c: asOwner, a: dirAttr(0o755), set: SetAttr{Gid: ptr[uint32](20)}},

		{name: "size by writer", c: asStranger, a: regAttr(0o666), set: SetAttr{Size: ptr[uint64](0)}},
		{name: "size by owner without write", c: asOwner, a: regAttr(0o444), set: SetAttr{Size: ptr[uint64](0)}, err: ErrAccess},
		{name: "size by group without write", c: asSuppl, a: regAttr(0o646), set: SetAttr{Size: ptr[uint64](0)}, err: ErrAccess},
		{name: "size by root", c: asRoot, a: regAttr(0o000), set: SetAttr{Size: ptr[uint64](0)}},
		{name: "size refused before chown", c: asOwner, a: regAttr(0o444),
			set: SetAttr{Size: ptr[uint64](0), Uid: ptr[uint32](13)}, err: ErrAccess},

		{name: "explicit times by owner", c: asOwner, a: regAttr(0o444), set: SetAttr{Atime: when, Mtime: when}},
		{name: "explicit mtime by writer", c: asStranger, a: regAttr(0o666), set: SetAttr{Mtime: when}, err: ErrNotPermitted},
		{name: "explicit atime by writer", c: asStranger, a: regAttr(0o666), set: SetAttr{Atime: when}, err: ErrNotPermitted},
		{name: "explicit times by root", c: asRoot, a: regAttr(0o000), set: SetAttr{Atime: when, Mtime: when}},
		{name: "times now by writer", c: asStranger, a: regAttr(0o666), set: SetAttr{Atime: when, Mtime: when, TimesNow: true}},
		{name: "times now by group writer", c: asSuppl, a: regAttr(0o664), set: SetAttr{Mtime: when, TimesNow: true}},
		{name: "times now by owner without write", c: asOwner, a: regAttr(0o444), set: SetAttr{Atime: when, Mtime: when, TimesNow: true}},
		{name: "times now by root", c: asRoot, a: regAttr(0o000), set: SetAttr{Atime: when, Mtime: when, TimesNow: true}},
		{name: "times now by reader", c: asStranger, a: regAttr(0o644), set: SetAttr{Atime: when, Mtime: when, TimesNow: true}, err: ErrAccess},
		{name: "TimesNow without times", c: asStranger, a: regAttr(0o644), set: SetAttr{TimesNow: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var given uint32
			if tt.set.Mode != nil {
				given = *tt.set.Mode
			}
			got, err := tt.c.CheckSetattr(tt.a, tt.set)
			if tt.set.Mode != nil && *tt.set.Mode != given {
				t.Errorf("CheckSetattr changed the caller's Mode to %o", *tt.set.Mode)
			}
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("uid %d CheckSetattr(mode %o) = %v, want %v", tt.c.Uid, tt.a.Mode, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("uid %d CheckSetattr(mode %o) = %v, want ok", tt.c.Uid, tt.a.Mode, err)
			}
			if (got.Mode == nil) != (tt.set.Mode == nil) || got.Mode != nil && *got.Mode != tt.mode {
				t.Errorf("Mode = %s, want %o", fmtMode(got.Mode), tt.mode)
			}
			if got.KillPriv != tt.kill {
				t.Errorf("KillPriv = %v, want %v", got.KillPriv, tt.kill)
			}
			if got.Uid != tt.set.Uid || got.Gid != tt.set.Gid || got.Size != tt.set.Size ||
				got.Atime != tt.set.Atime || got.Mtime != tt.set.Mtime || got.TimesNow != tt.set.TimesNow {
				t.Errorf("CheckSetattr changed more than Mode and KillPriv: %+v from %+v", got, tt.set)
			}
		})
	}
}

func fmtMode(m *uint32) string {
	if m == nil {
		return "nil"
	}
	return fmt.Sprintf("%o", *m)
}
