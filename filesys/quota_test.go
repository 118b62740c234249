package filesys

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
)

func u64(n uint64) *uint64 { return &n }

// recount walks directory root and sums what its quota counts.
func recount(t *testing.T, fs *FS, root uint64) (bytes, inodes int64) {
	t.Helper()
	ctx := context.Background()
	seen := map[uint64]bool{} // hard links count once
	err := fs.quotaWalk(ctx, root, func(_ uint64, _ string, ino uint64) error {
		if seen[ino] {
			return nil
		}
		seen[ino] = true
		a, err := fs.Getattr(ctx, ino)
		if err != nil {
			return err
		}
		inodes++
		if a.Mode&typeMask == typeReg || a.Mode&typeMask == typeLnk {
			bytes += int64(a.Size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, inodes
}

func checkUsage(t *testing.T, fs *FS, root uint64) QuotaInfo {
	t.Helper()
	info, err := fs.QuotaInfo(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	b, n := recount(t, fs, root)
	if info.UsedBytes != b || info.UsedInodes != n {
		t.Fatalf("quota usage %d bytes %d inodes, recount %d bytes %d inodes", info.UsedBytes, info.UsedInodes, b, n)
	}
	checkGranted(t, fs, root)
	return info
}

// checkGranted checks the head's granted sums against the ledgers'
// allowances (in a dimension with a limit), and that they cover the usage.
func checkGranted(t *testing.T, fs *FS, root uint64) {
	t.Helper()
	ctx := context.Background()
	h, err := fs.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.release()
	rb, err := fs.lockRealm(ctx, h, fs.newTx(ctx), root, false, true)
	if err != nil {
		t.Fatal(err)
	}
	var ab, ai int64
	for s, l := range rb.ledgers {
		ab += l.AllowBytes
		ai += l.AllowInodes
		if (rb.head.LimitBytes > 0 && l.UsedBytes > l.AllowBytes) || (rb.head.LimitInodes > 0 && l.UsedInodes > l.AllowInodes) {
			t.Fatalf("slot %d used over its allowance: %+v", s, l)
		}
	}
	if (rb.head.LimitBytes > 0 && ab != rb.head.GrantedBytes) || (rb.head.LimitInodes > 0 && ai != rb.head.GrantedInodes) {
		t.Fatalf("granted %d bytes %d inodes, allowances sum to %d and %d", rb.head.GrantedBytes, rb.head.GrantedInodes, ab, ai)
	}
}

// fill writes chunk-byte pieces to file ino until a write fails; it
// returns the bytes written and the error.
func fill(fs *FS, ino uint64, chunk int) (uint64, error) {
	p := make([]byte, chunk)
	var off uint64
	for {
		n, err := fs.Write(context.Background(), ino, 0, p, off, false)
		off += uint64(n)
		if err != nil || off > 1<<28 {
			return off, err // 256 MiB: far past every limit here
		}
	}
}

func TestQuotaSolo(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{}
	d, _ := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	out, _ := fs.Mkdir(ctx, RootIno, "out", 0o755, c)
	const limit = 1 << 20
	if err := fs.SetQuota(ctx, d.Ino, QuotaLimits{Bytes: u64(limit), Inodes: u64(4)}); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(ctx, d.Ino, "f", 0o644, c, true)
	if err != nil {
		t.Fatal(err)
	}
	n, err := fill(fs, f.Ino, 100_000)
	if !errors.Is(err, ErrQuota) || n > limit || n < limit-100_000 {
		t.Fatalf("filled %d bytes of %d, then %v", n, limit, err)
	}
	// A write that fits exactly is accepted.
	if _, err := fs.Write(ctx, f.Ino, 0, make([]byte, limit-n), n, false); err != nil {
		t.Fatalf("the last %d bytes: %v", limit-n, err)
	}
	if _, err := fs.Write(ctx, f.Ino, 0, []byte{1}, limit, false); !errors.Is(err, ErrQuota) {
		t.Fatalf("one byte past the limit: %v", err)
	}
	if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Size: u64(limit + 1)}); !errors.Is(err, ErrQuota) {
		t.Fatalf("truncate past the limit: %v", err)
	}
	checkUsage(t, fs, d.Ino)
	// Inodes: f, sub, and two more; the fifth is refused.
	sub, err := fs.Mkdir(ctx, d.Ino, "sub", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Symlink(ctx, sub.Ino, "l", "target", c); !errors.Is(err, ErrQuota) {
		t.Fatalf("a symlink's bytes count: %v", err)
	}
	if _, err := fs.Create(ctx, sub.Ino, "g", 0o644, c, true); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mknod(ctx, sub.Ino, "h", 0o644, 0, c); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(ctx, sub.Ino, "i", 0o644, c, true); !errors.Is(err, ErrQuota) {
		t.Fatalf("fifth inode: %v", err)
	}
	info := checkUsage(t, fs, d.Ino)
	if info.UsedInodes != 4 || info.UsedBytes != limit {
		t.Fatalf("usage %+v", info)
	}
	// Deleting frees at once.
	if err := fs.Unlink(ctx, sub.Ino, "h"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Setattr(ctx, f.Ino, SetAttr{Size: u64(limit / 2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Symlink(ctx, sub.Ino, "l", "target", c); err != nil {
		t.Fatalf("after freeing: %v", err)
	}
	checkUsage(t, fs, d.Ino)
	// Between realms: EXDEV; a link too.
	if err := fs.Rename(ctx, d.Ino, "f", out.Ino, "f", 0); !errors.Is(err, ErrCrossDevice) {
		t.Fatalf("rename out of the realm: %v", err)
	}
	if _, err := fs.Link(ctx, f.Ino, out.Ino, "f"); !errors.Is(err, ErrCrossDevice) {
		t.Fatalf("link out of the realm: %v", err)
	}
	if err := fs.Rename(ctx, d.Ino, "f", sub.Ino, "f2", 0); err != nil {
		t.Fatalf("rename inside the realm: %v", err)
	}
	// Raising the limit lets writes go on; removing it too.
	if err := fs.SetQuota(ctx, d.Ino, QuotaLimits{Inodes: u64(0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(ctx, sub.Ino, "many", 0o644, c, true); err != nil {
		t.Fatalf("no inode limit: %v", err)
	}
	checkUsage(t, fs, d.Ino)
	for _, x := range []string{QuotaXattr, QuotaUserXattr} {
		if v, err := fs.Getxattr(ctx, d.Ino, x); err != nil || string(v) != fmt.Sprintf("bytes=%d inodes=none", limit) {
			t.Fatalf("%s = %q, %v", x, v, err)
		}
	}
}

func TestQuotaNonsense(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{}
	d, _ := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	inner, _ := fs.Mkdir(ctx, d.Ino, "inner", 0o755, c)
	f, _ := fs.Create(ctx, RootIno, "f", 0o644, c, true)
	for _, s := range []string{"", "bytes", "bytes=-1", "bytes=1x", "files=3", "bytes=1 bytes=2", "inodes=99999999999999999999"} {
		if _, err := ParseQuota(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseQuota(%q): %v", s, err)
		}
	}
	if err := fs.Setxattr(ctx, f.Ino, QuotaXattr, []byte("bytes=10"), 0); !errors.Is(err, ErrNotDir) {
		t.Errorf("quota on a file: %v", err)
	}
	// Quotas nest RealmsMax deep: d/inner/l2/l3 take one each, a fifth
	// level (below l3, or above d) is refused.
	l2, _ := fs.Mkdir(ctx, inner.Ino, "l2", 0o755, c)
	l3, _ := fs.Mkdir(ctx, l2.Ino, "l3", 0o755, c)
	l4, _ := fs.Mkdir(ctx, l3.Ino, "l4", 0o755, c)
	for _, x := range []uint64{inner.Ino, l3.Ino, d.Ino, l2.Ino} {
		if err := fs.Setxattr(ctx, x, QuotaXattr, []byte("bytes=1000"), 0); err != nil {
			t.Fatalf("quota on %d: %v", x, err)
		}
	}
	if err := fs.Setxattr(ctx, l4.Ino, QuotaXattr, []byte("bytes=10"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a fifth quota below: %v", err)
	}
	if err := fs.Setxattr(ctx, RootIno, QuotaXattr, []byte("bytes=10"), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a fifth quota above: %v", err)
	}
	if err := fs.Setxattr(ctx, inner.Ino, RbytesXattr, []byte("0"), 0); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("setting rbytes: %v", err)
	}
	if err := fs.Setxattr(ctx, inner.Ino, QuotaUserXattr, []byte("bytes=1000000"), 0); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("setting the quota through the user namespace: %v", err)
	}
	if _, err := fs.Getxattr(ctx, l4.Ino, RbytesXattr); !errors.Is(err, ErrNoAttr) {
		t.Errorf("rbytes of a directory without quota: %v", err)
	}
	for x, want := range map[uint64]string{d.Ino: "4", inner.Ino: "3", l2.Ino: "2", l3.Ino: "1"} {
		if v, err := fs.Getxattr(ctx, x, RfilesXattr); err != nil || string(v) != want {
			t.Errorf("rfiles of %d = %q, %v; want %s", x, v, err, want)
		}
	}
}

// TestQuotaExistingTree: a quota set on a full directory counts it.
func TestQuotaExistingTree(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{}
	d, _ := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	for i := 0; i < 5; i++ {
		s, _ := fs.Mkdir(ctx, d.Ino, fmt.Sprintf("s%d", i), 0o755, c)
		for j := 0; j < 7; j++ {
			f, _ := fs.Create(ctx, s.Ino, fmt.Sprintf("f%d", j), 0o644, c, true)
			fs.Write(ctx, f.Ino, 0, make([]byte, 1000*(i+j)), 0, false)
		}
		fs.Symlink(ctx, s.Ino, "l", "some target", c)
	}
	if err := fs.SetQuota(ctx, d.Ino, QuotaLimits{Bytes: u64(100)}); err != nil {
		t.Fatal(err)
	}
	info := checkUsage(t, fs, d.Ino)
	if info.UsedInodes != 5*9 {
		t.Fatalf("%d inodes counted", info.UsedInodes)
	}
	// Above its limit already: nothing grows, shrinking is fine.
	f, _ := fs.Lookup(ctx, d.Ino, "s1")
	g, _ := fs.Lookup(ctx, f.Ino, "f1")
	if _, err := fs.Write(ctx, g.Ino, 0, []byte("x"), g.Size, false); !errors.Is(err, ErrQuota) {
		t.Fatalf("growth over the limit: %v", err)
	}
	if err := fs.Unlink(ctx, f.Ino, "f1"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, fs, d.Ino)
}

// TestQuotaCrash: after a crash and replay of the log, the usage equals
// a recount, whatever part of the changes the log kept.
func TestQuotaCrash(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	a, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c := Caller{}
	d, _ := a.Mkdir(ctx, RootIno, "d", 0o755, c)
	if err := a.SetQuota(ctx, d.Ino, QuotaLimits{Bytes: u64(1 << 30)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		f, err := a.Create(ctx, d.Ino, fmt.Sprintf("f%d", i), 0o644, c, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Write(ctx, f.Ino, 0, make([]byte, 5000*i), 0, false); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			a.Unlink(ctx, d.Ino, fmt.Sprintf("f%d", i-1))
		}
		if i == 12 {
			a.Sync(ctx) // what follows may be lost, or not
		}
	}
	before, _ := a.QuotaInfo(ctx, d.Ino)
	b := crashAndRecover(t, a, dev)
	defer b.Close(ctx)
	after := checkUsage(t, b, d.Ino)
	if after.UsedInodes < 10 || after.UsedInodes > before.UsedInodes {
		t.Fatalf("after recovery %d inodes, %d before the crash", after.UsedInodes, before.UsedInodes)
	}
	// The dead node's allowance comes back: b can fill the realm.
	f, _ := b.Create(ctx, d.Ino, "big", 0o644, c, true)
	if _, err := b.Setattr(ctx, f.Ino, SetAttr{Size: u64(uint64(1<<30 - after.UsedBytes))}); err != nil {
		t.Fatalf("the rest of the limit after recovery: %v", err)
	}
	checkUsage(t, b, d.Ino)
}

// TestQuotaTwoNodes: two nodes fill one realm at once: together they
// never pass the limit, both get ErrQuota, a delete on one lets the other
// write again, and a crash of one leaves the usage exact.
func TestQuotaTwoNodes(t *testing.T) {
	ctx := context.Background()
	dev := formatted(t)
	hub := newLockHub()
	a := hub.open(t, dev, "a", 1)
	b := hub.open(t, dev, "b", 2)
	defer b.Close(ctx)
	c := Caller{}
	d, _ := a.Mkdir(ctx, RootIno, "d", 0o755, c)
	const limit = 8 << 20
	if err := a.SetQuota(ctx, d.Ino, QuotaLimits{Bytes: u64(limit)}); err != nil {
		t.Fatal(err)
	}
	// A node that never charged the realm frees what another charged.
	x, _ := a.Create(ctx, d.Ino, "x", 0o644, c, true)
	a.Write(ctx, x.Ino, 0, make([]byte, 5000), 0, false)
	if err := b.Unlink(ctx, d.Ino, "x"); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, a, d.Ino)
	fa, _ := a.Create(ctx, d.Ino, "fa", 0o644, c, true)
	fb, _ := b.Create(ctx, d.Ino, "fb", 0o644, c, true)
	grows0 := testutil.ToFloat64(a.stats.quotaGrows) // a's and b's: one series
	var wg sync.WaitGroup
	var na, nb uint64
	var ea, eb error
	wg.Add(2)
	go func() { defer wg.Done(); na, ea = fill(a, fa.Ino, 64<<10) }()
	go func() { defer wg.Done(); nb, eb = fill(b, fb.Ino, 64<<10) }()
	wg.Wait()
	if !errors.Is(ea, ErrQuota) || !errors.Is(eb, ErrQuota) {
		t.Fatalf("writers stopped with %v and %v", ea, eb)
	}
	if na+nb > limit || na+nb <= limit-2*(64<<10) || na == 0 || nb == 0 {
		t.Fatalf("wrote %d + %d bytes under a limit of %d", na, nb, limit)
	}
	writes := (na + nb) / (64 << 10)
	grows := testutil.ToFloat64(a.stats.quotaGrows) - grows0
	t.Logf("%d writes, %v grows of the allowance (lock-service work)", writes, grows)
	if grows > float64(writes)/3 { // 13 to 25 seen; one per write without shares
		t.Fatalf("%v grows for %d writes: the allowance does not spare the lock service", grows, writes)
	}
	info := checkUsage(t, b, d.Ino)
	if info.UsedBytes != int64(na+nb) {
		t.Fatalf("usage %d, written %d", info.UsedBytes, na+nb)
	}
	// A's delete frees the bytes for b at once.
	if err := a.Unlink(ctx, d.Ino, "fa"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, fb.Ino, 0, make([]byte, na), nb, false); err != nil {
		t.Fatalf("b writing what a freed: %v", err)
	}
	// a writes, crashes; b replays its log.
	g, _ := a.Create(ctx, d.Ino, "g", 0o644, c, true)
	if err := b.Unlink(ctx, d.Ino, "fb"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(ctx, g.Ino, 0, make([]byte, 3<<20), 0, false); err != nil {
		t.Fatal(err)
	}
	a.Sync(ctx)
	a.Write(ctx, g.Ino, 0, make([]byte, 1<<20), 3<<20, false) // lost or kept
	hub.crash("a")
	if err := b.Recover(ctx, "v", "a", 1); err != nil {
		t.Fatal(err)
	}
	hub.drop("a")
	info = checkUsage(t, b, d.Ino)
	// The rest of the limit, a's unused allowance included, is b's.
	h, _ := b.Create(ctx, d.Ino, "h", 0o644, c, true)
	if _, err := b.Setattr(ctx, h.Ino, SetAttr{Size: u64(uint64(limit - info.UsedBytes))}); err != nil {
		t.Fatalf("the rest after a's crash: %v", err)
	}
	if _, err := b.Write(ctx, h.Ino, 0, []byte{1}, uint64(limit-info.UsedBytes), false); !errors.Is(err, ErrQuota) {
		t.Fatalf("a byte past the limit: %v", err)
	}
	checkUsage(t, b, d.Ino)
}

// TestQuotaCountResumes: a first count interrupted part way (the node
// stopped) leaves the usage partial and says so; setting the quota again
// finishes it.
func TestQuotaCountResumes(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{}
	d, _ := fs.Mkdir(ctx, RootIno, "d", 0o755, c)
	for i := 0; i < 3; i++ {
		s, _ := fs.Mkdir(ctx, d.Ino, fmt.Sprintf("s%d", i), 0o755, c)
		for j := 0; j < 4; j++ {
			f, _ := fs.Create(ctx, s.Ino, fmt.Sprintf("f%d", j), 0o644, c, true)
			fs.Write(ctx, f.Ino, 0, make([]byte, 777*(j+1)), 0, false)
		}
	}
	// The set, interrupted after the head and one entry.
	if counting, err := fs.setQuotaHead(ctx, d.Ino, QuotaLimits{Bytes: u64(1 << 20)}); err != nil || !counting {
		t.Fatalf("first set: counting %v, %v", counting, err)
	}
	if err := fs.tagEntry(ctx, d.Ino, realms{}, d.Ino, "s1"); err != nil {
		t.Fatal(err)
	}
	info, _ := fs.QuotaInfo(ctx, d.Ino)
	if !info.Counting || info.UsedInodes != 1 {
		t.Fatalf("interrupted: %+v", info)
	}
	// New files in the counted part are charged; in the rest, not yet.
	s1, _ := fs.Lookup(ctx, d.Ino, "s1")
	fs.Create(ctx, s1.Ino, "new", 0o644, c, true)
	if err := fs.SetQuota(ctx, d.Ino, QuotaLimits{}); err != nil {
		t.Fatal(err)
	}
	if info = checkUsage(t, fs, d.Ino); info.Counting || info.UsedInodes != 3+3*4+1 {
		t.Fatalf("resumed: %+v", info)
	}
}

// TestQuotaRandomTwoNodes: a seeded mix of every counted operation on
// two nodes of one realm, checked against a recount all along: usage is
// exact and never over the limits; then one node crashes and the other
// recovers it, and the usage is exact again.
func TestQuotaRandomTwoNodes(t *testing.T) {
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("PLUMERIA_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("PLUMERIA_SEED=%d", seed)
	dev := formatted(t)
	hub := newLockHub()
	nodes := []*FS{hub.open(t, dev, "a", 1), hub.open(t, dev, "b", 2)}
	defer nodes[1].Close(ctx)
	c := Caller{}
	d, _ := nodes[0].Mkdir(ctx, RootIno, "d", 0o755, c)
	out, _ := nodes[0].Mkdir(ctx, RootIno, "out", 0o755, c)
	const limitB, limitI = 2 << 20, 40
	if err := nodes[1].SetQuota(ctx, d.Ino, QuotaLimits{Bytes: u64(limitB), Inodes: u64(limitI)}); err != nil {
		t.Fatal(err)
	}
	// A nested quota, smaller.
	in, _ := nodes[0].Mkdir(ctx, d.Ino, "inner", 0o755, c)
	const innerB, innerI = 1 << 20, 15
	if err := nodes[0].SetQuota(ctx, in.Ino, QuotaLimits{Bytes: u64(innerB), Inodes: u64(innerI)}); err != nil {
		t.Fatal(err)
	}
	dirs := []uint64{d.Ino, in.Ino}
	names := func(fs *FS, dir uint64) []DirEntry {
		ents, _, _ := fs.ReadDir(ctx, dir, 0, 1000)
		return ents
	}
	pick := func(fs *FS) (uint64, *DirEntry) {
		dir := dirs[rng.IntN(len(dirs))]
		ents := names(fs, dir)
		if len(ents) == 0 {
			return dir, nil
		}
		return dir, &ents[rng.IntN(len(ents))]
	}
	for step := 0; step < 400; step++ {
		fs := nodes[rng.IntN(2)]
		dir, e := pick(fs)
		name := fmt.Sprintf("n%d", step)
		var err error
		switch op := rng.IntN(9); {
		case op == 0:
			var a Attr
			if a, err = fs.Mkdir(ctx, dir, name, 0o755, c); err == nil {
				dirs = append(dirs, a.Ino)
			}
		case op == 1:
			_, err = fs.Symlink(ctx, dir, name, fmt.Sprintf("target-%d", rng.IntN(1000)), c)
		case op <= 3:
			_, err = fs.Create(ctx, dir, name, 0o644, c, true)
		case e != nil && e.Mode == typeReg && op <= 5:
			_, err = fs.Write(ctx, e.Ino, 0, make([]byte, rng.IntN(300<<10)), uint64(rng.IntN(200<<10)), false)
		case e != nil && e.Mode == typeReg && op == 6:
			_, err = fs.Setattr(ctx, e.Ino, SetAttr{Size: u64(uint64(rng.IntN(400 << 10)))})
		case e != nil && e.Mode != typeDir && op == 7:
			err = fs.Unlink(ctx, dir, e.Name)
		case e != nil && e.Mode == typeReg && op == 8:
			if rng.IntN(2) == 0 {
				_, err = fs.Link(ctx, e.Ino, dirs[rng.IntN(len(dirs))], name)
			} else if err = fs.Rename(ctx, dir, e.Name, out.Ino, name, 0); !errors.Is(err, ErrCrossDevice) {
				t.Fatalf("step %d: rename out of the realm: %v", step, err)
			} else {
				to := dirs[rng.IntN(len(dirs))]
				for _, x := range names(fs, to) {
					if x.Mode != typeDir && x.Ino != e.Ino && rng.IntN(2) == 0 {
						name = x.Name // replace it
						break
					}
				}
				err = fs.Rename(ctx, dir, e.Name, to, name, 0)
			}
		}
		if err != nil && !errors.Is(err, ErrQuota) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExists) && !errors.Is(err, ErrCrossDevice) {
			t.Fatalf("step %d: %v", step, err)
		}
		if step%50 == 49 {
			info := checkUsage(t, nodes[rng.IntN(2)], d.Ino)
			inner := checkUsage(t, nodes[rng.IntN(2)], in.Ino)
			if info.UsedBytes > limitB || info.UsedInodes > limitI || inner.UsedBytes > innerB || inner.UsedInodes > innerI {
				t.Fatalf("step %d: usage %+v, inner %+v, over the limits", step, info, inner)
			}
		}
	}
	hub.crash("a") // what it changed since its last log write (revokes force them) is lost
	if err := nodes[1].Recover(ctx, "v", "a", 1); err != nil {
		t.Fatal(err)
	}
	hub.drop("a")
	info := checkUsage(t, nodes[1], d.Ino)
	checkUsage(t, nodes[1], in.Ino)
	t.Logf("after the crash: %d bytes, %d inodes", info.UsedBytes, info.UsedInodes)
}

// TestQuotaNested: a quota inside a quota: each holds, an inode counts in
// both, deleting frees both, moves between them are EXDEV, and a quota
// set above an existing one counts through it.
func TestQuotaNested(t *testing.T) {
	ctx := context.Background()
	fs := openSolo(t, formatted(t), "a")
	defer fs.Close(ctx)
	c := Caller{}
	o, _ := fs.Mkdir(ctx, RootIno, "o", 0o755, c)
	q, _ := fs.Mkdir(ctx, o.Ino, "q", 0o755, c)
	sib, _ := fs.Mkdir(ctx, o.Ino, "s", 0o755, c)
	if err := fs.SetQuota(ctx, o.Ino, QuotaLimits{Bytes: u64(1 << 20)}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetQuota(ctx, q.Ino, QuotaLimits{Bytes: u64(600_000)}); err != nil {
		t.Fatal(err)
	}
	fq, _ := fs.Create(ctx, q.Ino, "f", 0o644, c, true)
	if n, err := fill(fs, fq.Ino, 50_000); !errors.Is(err, ErrQuota) || n != 600_000 {
		t.Fatalf("inner quota: %d bytes, then %v", n, err)
	}
	fsib, _ := fs.Create(ctx, sib.Ino, "f", 0o644, c, true)
	if n, err := fill(fs, fsib.Ino, 4096); !errors.Is(err, ErrQuota) || n+600_000 > 1<<20 || n+600_000 <= 1<<20-4096 {
		t.Fatalf("outer quota: %d bytes beside the inner 600000, then %v", n, err)
	}
	checkUsage(t, fs, o.Ino)
	checkUsage(t, fs, q.Ino)
	if err := fs.Rename(ctx, sib.Ino, "f", q.Ino, "g", 0); !errors.Is(err, ErrCrossDevice) {
		t.Fatalf("into the inner quota: %v", err)
	}
	if err := fs.Rename(ctx, q.Ino, "f", o.Ino, "g", 0); !errors.Is(err, ErrCrossDevice) {
		t.Fatalf("out of the inner quota: %v", err)
	}
	if err := fs.Rename(ctx, sib.Ino, "f", o.Ino, "g", 0); err != nil {
		t.Fatalf("within the outer quota: %v", err)
	}
	// Deleting in the inner quota frees the outer one too.
	if err := fs.Unlink(ctx, q.Ino, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(ctx, fsib.Ino, 0, make([]byte, 500_000), 0, false); err != nil {
		t.Fatalf("the outer quota after a delete in the inner: %v", err)
	}
	checkUsage(t, fs, o.Ino)
	checkUsage(t, fs, q.Ino)
	// A quota set above existing ones counts through them.
	top, _ := fs.Mkdir(ctx, RootIno, "top", 0o755, c)
	if err := fs.Rename(ctx, RootIno, "o", top.Ino, "o", 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetQuota(ctx, top.Ino, QuotaLimits{Inodes: u64(100)}); err != nil {
		t.Fatal(err)
	}
	info := checkUsage(t, fs, top.Ino)
	if info.UsedInodes != 4 {
		t.Fatalf("top counts %d inodes, want o, q, s, g", info.UsedInodes)
	}
	if _, err := fs.Create(ctx, q.Ino, "new", 0o644, c, true); err != nil {
		t.Fatal(err)
	}
	for _, r := range []uint64{top.Ino, o.Ino, q.Ino} {
		checkUsage(t, fs, r)
	}
}
