package fsck

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// TestQuotaRecount: fsck finds a quota's usage that differs from a
// recount, and an inode counted in a realm that is no quota directory,
// and --repair makes both right.
func TestQuotaRecount(t *testing.T) {
	ctx := context.Background()
	dev := newMemDevice()
	if _, err := filesys.Format(ctx, dev, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	fs := openFS(t, dev, "q", 0)
	c := filesys.Caller{}
	d := must(fs.Mkdir(ctx, filesys.RootIno, "d", 0o755, c))
	other := must(fs.Mkdir(ctx, filesys.RootIno, "other", 0o755, c))
	lim := uint64(1 << 20)
	if err := fs.SetQuota(ctx, d.Ino, filesys.QuotaLimits{Bytes: &lim}); err != nil {
		t.Fatal(err)
	}
	f := must(fs.Create(ctx, d.Ino, "f", 0o644, c, true))
	must(fs.Write(ctx, f.Ino, 0, make([]byte, 12345), 0, false))
	must(fs.Symlink(ctx, d.Ino, "l", "abc", c))
	// A nested quota: its file counts in both.
	n := must(fs.Mkdir(ctx, d.Ino, "n", 0o755, c))
	if err := fs.SetQuota(ctx, n.Ino, filesys.QuotaLimits{Bytes: &lim}); err != nil {
		t.Fatal(err)
	}
	nf := must(fs.Create(ctx, n.Ino, "nf", 0o644, c, true))
	must(fs.Write(ctx, nf.Ino, 0, make([]byte, 1000), 0, false))
	g := must(fs.Create(ctx, other.Ino, "g", 0o644, c, true))
	if err := fs.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(ctx, dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)

	// Damage: a ledger off by 100 bytes, and g tagged with d's realm
	// though it is outside (so d's recount does not include it either).
	b := readBlock(t, dev, layout.QuotaAddr(d.Ino, 0))
	head, _ := layout.DecodeQuotaHead(b, d.Ino)
	s := head.SlotList()[0]
	b = readBlock(t, dev, layout.QuotaAddr(d.Ino, 1+s))
	l, _ := layout.DecodeQuotaLedger(b, d.Ino, 1+s)
	l.UsedBytes += 100
	layout.EncodeQuotaLedger(b, d.Ino, 1+s, layout.Version(b)+1, l)
	dev.WriteData(ctx, b, layout.QuotaAddr(d.Ino, 1+s))
	editInode(t, dev, g.Ino, func(in *layout.Inode) { in.Realms[0] = other.Ino })

	rep, err = Check(ctx, dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := lines(rep)
	for _, want := range []string{"a recount 13348 bytes and 4 inodes", "of which only [] are quota directories"} {
		if !strings.Contains(text, want) {
			t.Errorf("problems lack %q:\n%s", want, text)
		}
	}
	if rep, err = Check(ctx, dev, Options{Repair: true}); err != nil || !rep.Clean() {
		t.Fatalf("repair: %v\n%s", err, lines(rep))
	}
	rep, err = Check(ctx, dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	expectClean(t, rep)
	fs = openFS(t, dev, "q2", 0)
	defer fs.Close(ctx)
	info, err := fs.QuotaInfo(ctx, d.Ino)
	if err != nil || info.UsedBytes != 13348 || info.UsedInodes != 4 || info.LimitBytes != lim {
		t.Fatalf("after repair: %+v, %v", info, err)
	}
	if info, err := fs.QuotaInfo(ctx, n.Ino); err != nil || info.UsedBytes != 1000 || info.UsedInodes != 1 {
		t.Fatalf("nested after repair: %+v, %v", info, err)
	}
}
