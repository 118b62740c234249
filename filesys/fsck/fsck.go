// Package fsck is the offline checker of a Plumeria file system
// (DESIGN.md §4): it verifies every invariant of the layout on a volume
// that no node has mounted and, with Options.Repair, fixes what it safely
// can, writing repaired metadata blocks in place with a bumped version so
// that no replay of an old log can ever overwrite them.
//
// What it checks, in order:
//
//   - the superblock decodes (otherwise Check fails);
//   - no log slot is in use (a node holds the volume or crashed), nor left
//     recovered with orphans to free (no node mounted since); Repair
//     replays the slot's log (filesys.ReplayLog), clears its orphan table
//     (the orphans are freed below: they are unreachable) and frees the
//     slot;
//   - every resource group block decodes, belongs where it is, and its used
//     count matches its bitmap (Repair: the count is recomputed);
//   - every allocated inode's block decodes and belongs where it is; a
//     regular file's size agrees with its inline bytes or fits its extent;
//     a symlink has a non-empty target of its size; its type is known;
//   - the tree from the root: each directory's root and hash blocks decode
//     (block headers KindDir, owned by the directory, at their index) and
//     pass dir.Check; each entry names an inode that decodes and is in use
//     (Repair: the entry is removed), with the entry's type (Repair: fixed),
//     allocated in its group's bitmap (Repair: the bit is set); no
//     directory is reachable twice; each directory's parent field names
//     the directory that lists it (Repair: fixed);
//   - link counts: a file's is the number of entries naming it, a
//     directory's 2 + its subdirectories (Repair: fixed);
//   - allocated but unreachable inodes are orphans (Repair: freed, their
//     extents decommitted), unless the walk missed part of the tree.
//
// Damage that cannot be repaired safely (an undecodable root or directory,
// a directory named twice, a bad inode's contents) is reported and left.
package fsck

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/acl"
	"github.com/plumeria-fs/plumeria/filesys/dir"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// Options configures Check.
type Options struct {
	// Repair fixes what can be fixed safely, writing to the volume.
	Repair bool
	// Progress, if set, is called now and then with the inodes checked so
	// far, the current estimate of the total, and what is being done.
	Progress func(done, total int64, what string)
	// Logger receives one line per repair (nil: discard).
	Logger *slog.Logger
	// Snapshot says the device is a snapshot taken through the barrier
	// (read-only): a log slot in use is no problem if every record of its
	// log is in place, as the barrier ensures. Not with Repair.
	Snapshot bool
	// Upgrade checks a file system of an earlier format version and, if
	// it is clean, rewrites its superblock as this build's format
	// (layout.UpgradeSuper; format 1 -> 2 changes nothing else). Implies
	// Repair for what the check finds.
	Upgrade bool
}

// Problem is one violated invariant.
type Problem struct {
	What     string // one line naming the inode or block and what is wrong
	Repaired bool
}

func (p Problem) String() string {
	if p.Repaired {
		return p.What + " [repaired]"
	}
	return p.What
}

// Report is what Check found.
type Report struct {
	Inodes      int64 // in-use inodes checked
	Directories int64
	Files       int64 // regular files
	Symlinks    int64
	Others      int64 // devices, fifos, sockets
	Problems    []Problem
	Repaired    int
	Upgraded    bool // the superblock was rewritten as this build's format (Options.Upgrade)
}

// Clean reports whether nothing is left wrong: no problem, or every
// problem repaired.
func (r *Report) Clean() bool { return r.Repaired == len(r.Problems) }

// Summary is the one-line summary of the report.
func (r *Report) Summary() string {
	return fmt.Sprintf("%d inodes, %d directories, %d files, %d symlinks, %d others; %d problems found, %d repaired",
		r.Inodes, r.Directories, r.Files, r.Symlinks, r.Others, len(r.Problems), r.Repaired)
}

const (
	typeMask  = syscall.S_IFMT
	typeDir   = syscall.S_IFDIR
	typeReg   = syscall.S_IFREG
	typeLnk   = syscall.S_IFLNK
	scanBatch = 32   // inode blocks read per request while scanning
	listPage  = 1024 // directory entries per List call
	readers   = 8    // concurrent scan requests
)

// info is what the checker keeps of one inode.
type info struct {
	bad      string // why the block does not decode; "" when it does
	mode     uint32
	nlink    uint32
	parent   uint64
	gen      uint64
	hwm      uint64
	fver     uint32
	nlog     uint64
	realms   [layout.RealmsMax]uint64 // the quota realms it is counted in
	charged  int64                    // the bytes it counts in its realm
	quota    bool                     // a directory that roots a quota realm
	rewrite  bool                     // header index wrong: re-encode if kept
	rewriteP int                      // the problem that reports it

	reached  bool
	links    uint32 // entries of reached directories naming it (non-directories)
	subdirs  uint32 // directories: subdirectories reached through it
	listedBy uint64 // directories: the directory whose entry reached it
}

func (in *info) isDir() bool { return in.bad == "" && in.mode&typeMask == typeDir }

type group struct {
	rg      *layout.RG // nil: undecodable
	version uint64
	dirty   bool
}

type checker struct {
	ctx  context.Context
	dev  filesys.Device
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	rep    Report
	groups []group
	inodes map[uint64]*info

	pmu         sync.Mutex // serialises Progress calls
	done, total int64      // inodes scanned, and the estimate of all
	dirsDone    int64      // directories walked
	complete    bool       // the walk saw the whole tree: orphans may be freed
}

// Check verifies the file system on dev (which no node may have mounted)
// and, with opts.Repair, repairs it (every write is dev.WriteData). It
// returns an error only when it cannot proceed: no superblock, or the
// volume fails.
func Check(ctx context.Context, dev filesys.Device, opts Options) (Report, error) {
	if opts.Snapshot && (opts.Repair || opts.Upgrade) {
		return Report{}, errors.New("fsck: a snapshot is read-only: no repair or upgrade")
	}
	if opts.Upgrade {
		opts.Repair = true
	}
	c := &checker{ctx: ctx, dev: dev, opts: opts, log: opts.Logger, inodes: map[uint64]*info{}, complete: true}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	err := c.run()
	return c.rep, err
}

func (c *checker) run() (rerr error) {
	b := make([]byte, layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, b, layout.SuperAddr); err != nil {
		return fmt.Errorf("read superblock: %w", err)
	}
	super, err := layout.DecodeSuper(b)
	var upgraded []byte
	if c.opts.Upgrade && (errors.Is(err, layout.ErrOldFormat) || err == nil && !super.HasHandleKey()) {
		var key [32]byte
		rand.Read(key[:])
		if upgraded, err = layout.UpgradeSuper(b, key); err == nil {
			super, err = layout.DecodeSuper(upgraded)
		}
	}
	if err != nil {
		return fmt.Errorf("superblock: %w", err)
	}
	defer func() {
		if upgraded != nil && rerr == nil {
			rerr = c.upgrade(upgraded)
		}
	}()
	if h, _ := layout.DecodeHeader(b); h.Owner != 0 || h.Index != 0 {
		c.problem("superblock: header names owner %d index %d (want 0, 0)", h.Owner, h.Index)
	}
	if err := c.checkSlots(super); err != nil {
		return err
	}
	if err := c.readGroups(); err != nil {
		return err
	}
	if err := c.scan(); err != nil {
		return err
	}
	c.progress("inodes")
	if err := c.walk(); err != nil {
		return err
	}
	if err := c.settle(); err != nil {
		return err
	}
	if err := c.checkQuotas(); err != nil {
		return err
	}
	if err := c.writeGroups(); err != nil {
		return err
	}
	c.progress("directories")
	return nil
}

// upgrade writes the superblock of this build's format once the check
// found the file system clean (or repaired it).
func (c *checker) upgrade(super []byte) error {
	if !c.rep.Clean() {
		return fmt.Errorf("not upgraded to format %d: %d problems left", layout.FormatVersion, len(c.rep.Problems)-c.rep.Repaired)
	}
	if err := c.dev.WriteMeta(c.ctx, super, layout.SuperAddr); err != nil {
		return fmt.Errorf("write the upgraded superblock: %w", err)
	}
	c.log.Info("fsck upgraded the file system", "format", layout.FormatVersion)
	c.rep.Upgraded = true
	return nil
}

// problem records an unrepaired problem and returns its index.
func (c *checker) problem(format string, args ...any) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Problems = append(c.rep.Problems, Problem{What: fmt.Sprintf(format, args...)})
	return len(c.rep.Problems) - 1
}

// repaired marks problem i repaired and logs how.
func (c *checker) repaired(i int, how string) {
	c.mu.Lock()
	p := &c.rep.Problems[i]
	if !p.Repaired {
		p.Repaired = true
		c.rep.Repaired++
	}
	what := p.What
	c.mu.Unlock()
	c.log.Info("fsck repaired", "problem", what, "repair", how)
}

// progress reports the inodes scanned so far (what = "inodes") or the
// directories walked (what = "directories").
func (c *checker) progress(what string) {
	if c.opts.Progress == nil {
		return
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	c.mu.Lock()
	done, total := c.done, max(c.total, c.done)
	if what == "directories" {
		done, total = c.dirsDone, max(c.rep.Directories, c.dirsDone)
	}
	c.mu.Unlock()
	c.opts.Progress(done, total, what)
}

// ---- log slots ----

func (c *checker) checkSlots(super layout.Super) error {
	buf := make([]byte, layout.SlotsMax*layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, buf, layout.SlotBase); err != nil {
		return fmt.Errorf("read log slots: %w", err)
	}
	for i := range layout.SlotsMax {
		b := buf[i*layout.BlockBytes : (i+1)*layout.BlockBytes]
		s, v, err := layout.DecodeSlot(b)
		if err != nil {
			c.problem("log slot %d (block %#x): %v", i, layout.SlotAddr(i), err)
			continue
		}
		if h, _ := layout.DecodeHeader(b); h.Kind == layout.KindSlot && (h.Index != uint64(i) || h.Owner != 0) {
			c.problem("log slot %d (block %#x): header names owner %d index %d", i, layout.SlotAddr(i), h.Owner, h.Index)
		}
		if !s.Used || s.UUID != super.UUID {
			continue // free, or left by an earlier format of the volume
		}
		if c.opts.Snapshot {
			if s.Recovered {
				continue // its orphans are freed in the live file system
			}
			n, err := filesys.UnappliedLog(c.ctx, c.dev, i)
			switch {
			case err != nil:
				c.problem("log slot %d of node %q (session %d) in the snapshot: its log cannot be read: %v", i, s.Name, s.Session, err)
			case n > 0:
				c.problem("log slot %d of node %q (session %d) in the snapshot: %d blocks lack records of its log (the snapshot was not taken through the barrier)", i, s.Name, s.Session, n)
			}
			continue
		}
		var p int
		if s.Recovered {
			p = c.problem("log slot %d of crashed node %q (session %d) was recovered, but the orphans it lists are not freed yet: a mounted node frees them", i, s.Name, s.Session)
		} else {
			p = c.problem("log slot %d is in use by node %q (session %d): the volume is mounted or that node crashed without recovery", i, s.Name, s.Session)
		}
		if !c.opts.Repair {
			continue
		}
		n := 0
		if !s.Recovered {
			if n, err = filesys.ReplayLog(c.ctx, c.dev, i); err != nil {
				return fmt.Errorf("replay log slot %d of %q: %w", i, s.Name, err)
			}
		}
		cleared, err := c.clearOrphanTable(i)
		if err != nil {
			return err
		}
		if err := c.dev.WriteData(c.ctx, layout.EncodeSlot(i, layout.Slot{}, v+1), layout.SlotAddr(i)); err != nil {
			return fmt.Errorf("free log slot %d: %w", i, err)
		}
		c.repaired(p, fmt.Sprintf("replayed its log (%d blocks written), cleared its orphan table (%d entries) and freed the slot", n, cleared))
	}
	return nil
}

// clearOrphanTable empties slot i's orphan table in place (with bumped
// versions) and returns how many entries it held. The inodes it named are
// unreachable: settle frees them.
func (c *checker) clearOrphanTable(i int) (int, error) {
	buf := make([]byte, layout.OrphanBlocks*layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, buf, layout.OrphanAddr(i, 0)); err != nil {
		return 0, fmt.Errorf("read the orphan table of log slot %d: %w", i, err)
	}
	n := 0
	for k := range layout.OrphanBlocks {
		b := buf[k*layout.BlockBytes : (k+1)*layout.BlockBytes]
		es, err := layout.DecodeOrphans(b, i, k)
		h, _ := layout.DecodeHeader(b)
		if err == nil && len(es) == 0 {
			continue
		}
		n += len(es)
		empty := make([]byte, layout.BlockBytes)
		layout.PutHeader(empty, layout.Header{Kind: layout.KindOrphan, Version: h.Version + 1, Index: uint64(i*layout.OrphanBlocks + k)})
		if err := c.dev.WriteData(c.ctx, empty, layout.OrphanAddr(i, k)); err != nil {
			return n, fmt.Errorf("clear block %d of the orphan table of log slot %d: %w", k, i, err)
		}
	}
	return n, nil
}

// ---- resource groups ----

func (c *checker) readGroups() error {
	buf := make([]byte, layout.RGsMax*layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, buf, layout.RGBase); err != nil {
		return fmt.Errorf("read resource groups: %w", err)
	}
	c.groups = make([]group, layout.RGsMax)
	for g := range layout.RGsMax {
		c.groups[g] = c.decodeGroup(buf[g*layout.BlockBytes:(g+1)*layout.BlockBytes], g)
		if r := c.groups[g].rg; r != nil {
			n := int64(r.Used)
			if g == 0 {
				n-- // inode 0
			}
			c.total += n
		}
	}
	return nil
}

// decodeGroup decodes group g's block, reporting (and, with Repair,
// fixing in memory) a wrong used count or a clear bit for inode 0.
func (c *checker) decodeGroup(b []byte, g int) group {
	addr := layout.RGAddr(g)
	h, err := layout.DecodeHeader(b)
	switch {
	case err != nil:
		c.problem("group %d (block %#x): %v; its inodes' allocation is unknown", g, addr, err)
		return group{}
	case h.Kind == layout.KindNone:
		r, _ := layout.DecodeRG(b, g)
		return group{rg: r}
	case h.Kind != layout.KindRG || h.Index != uint64(g) || h.Owner != 0:
		c.problem("group %d (block %#x): a %v block (owner %d, index %d) is where the group belongs; its inodes' allocation is unknown",
			g, addr, h.Kind, h.Owner, h.Index)
		return group{}
	}
	if r, err := layout.DecodeRG(b, g); err == nil {
		return group{rg: r, version: h.Version}
	}
	// The header is right: the count or inode 0's bit is wrong. The
	// payload is used u32 at 0, the bitmap at 8 (layout/rg.go).
	p := b[layout.HeaderBytes:]
	r := &layout.RG{}
	copy(r.Bitmap[:], p[8:])
	stored := binary.LittleEndian.Uint32(p[0:])
	n := 0
	for _, x := range r.Bitmap {
		n += bits.OnesCount8(x)
	}
	r.Used = uint32(n)
	gr := group{rg: r, version: h.Version}
	if stored != r.Used {
		i := c.problem("group %d (block %#x): used count %d, its bitmap has %d", g, addr, stored, n)
		if c.opts.Repair {
			gr.dirty = true
			c.repaired(i, fmt.Sprintf("count set to %d", n))
		}
	}
	if g == 0 && !r.IsSet(0) {
		i := c.problem("group 0 (block %#x): the bit of inode 0 (never used) is clear", addr)
		r.Set(0)
		if c.opts.Repair {
			gr.dirty = true
			c.repaired(i, "bit set")
		}
	}
	return gr
}

// allocated reports whether ino's bit is set, and whether that is known.
func (c *checker) allocated(ino uint64) (set, known bool) {
	gr := &c.groups[layout.RGOf(ino)]
	if gr.rg == nil {
		return false, false
	}
	return gr.rg.IsSet(int(ino % layout.InodesPerRG)), true
}

func (c *checker) setBit(ino uint64, on bool) {
	gr := &c.groups[layout.RGOf(ino)]
	if on {
		gr.rg.Set(int(ino % layout.InodesPerRG))
	} else {
		gr.rg.Clear(int(ino % layout.InodesPerRG))
	}
	gr.dirty = true
}

func (c *checker) writeGroups() error {
	if !c.opts.Repair {
		return nil
	}
	b := make([]byte, layout.BlockBytes)
	for g := range c.groups {
		gr := &c.groups[g]
		if !gr.dirty {
			continue
		}
		gr.rg.Encode(b, g, gr.version+1)
		if err := c.dev.WriteData(c.ctx, b, layout.RGAddr(g)); err != nil {
			return fmt.Errorf("write group %d: %w", g, err)
		}
		gr.dirty = false
	}
	return nil
}

// ---- inodes ----

type scanned struct {
	ino      uint64
	in       *info
	problems []string
}

// scan reads and checks every allocated inode, a few requests at a time.
func (c *checker) scan() error {
	for g := range c.groups {
		r := c.groups[g].rg
		if r == nil || r.Used == 0 || (g == 0 && r.Used == 1) {
			continue
		}
		var windows []int
		for w := 0; w < layout.InodesPerRG; w += scanBatch {
			for i := w; i < w+scanBatch; i++ {
				if r.IsSet(i) && (g != 0 || i != 0) {
					windows = append(windows, w)
					break
				}
			}
		}
		results := make([][]scanned, len(windows))
		eg, ctx := errgroup.WithContext(c.ctx)
		eg.SetLimit(readers)
		for k, w := range windows {
			eg.Go(func() error {
				first := uint64(g)*layout.InodesPerRG + uint64(w)
				buf := make([]byte, scanBatch*layout.BlockBytes)
				if err := c.dev.ReadAt(ctx, buf, layout.InodeAddr(first)); err != nil {
					return fmt.Errorf("read inodes %d-%d: %w", first, first+scanBatch-1, err)
				}
				for i := range scanBatch {
					if !r.IsSet(w+i) || (g == 0 && w+i == 0) {
						continue
					}
					ino := first + uint64(i)
					in, probs := checkInode(buf[i*layout.BlockBytes:(i+1)*layout.BlockBytes], ino)
					results[k] = append(results[k], scanned{ino, in, probs})
				}
				c.mu.Lock()
				c.done += int64(len(results[k]))
				c.mu.Unlock()
				c.progress("inodes")
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			return err
		}
		for _, rs := range results {
			for _, s := range rs {
				c.add(s)
			}
		}
	}
	return nil
}

func (c *checker) add(s scanned) {
	c.inodes[s.ino] = s.in
	if s.in.rewrite {
		s.in.rewriteP = c.problem("inode %d: its block's header has a nonzero index", s.ino)
	}
	for _, p := range s.problems {
		c.problem("%s", p)
	}
	if s.in.bad != "" || s.in.mode == 0 {
		return
	}
	c.rep.Inodes++
	switch s.in.mode & typeMask {
	case typeDir:
		c.rep.Directories++
	case typeReg:
		c.rep.Files++
	case typeLnk:
		c.rep.Symlinks++
	default:
		c.rep.Others++
	}
}

// get returns what is known of ino, reading it if it was not scanned (its
// bit is clear or its group undecodable).
func (c *checker) get(ino uint64) (*info, error) {
	if in := c.inodes[ino]; in != nil {
		return in, nil
	}
	b := make([]byte, layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, b, layout.InodeAddr(ino)); err != nil {
		return nil, fmt.Errorf("read inode %d: %w", ino, err)
	}
	in, probs := checkInode(b, ino)
	c.mu.Lock()
	c.done++
	c.total++
	c.mu.Unlock()
	c.add(scanned{ino, in, probs})
	return in, nil
}

// checkInode decodes inode ino's block and checks what the inode alone
// says. Problems found are returned as lines.
func checkInode(b []byte, ino uint64) (*info, []string) {
	in, _, err := layout.DecodeInode(b, ino)
	if err != nil {
		return &info{bad: err.Error()}, nil
	}
	x := &info{mode: in.Mode, nlink: in.Nlink, parent: in.Parent, gen: in.Gen, hwm: in.HWM, fver: in.FVer, nlog: in.NLog,
		realms: in.Realms, quota: in.Flags&layout.FlagQuota != 0}
	if t := in.Mode & typeMask; t == typeReg || t == typeLnk {
		x.charged = int64(in.Size)
	}
	var probs []string
	bad := func(format string, args ...any) {
		probs = append(probs, fmt.Sprintf("inode %d: ", ino)+fmt.Sprintf(format, args...))
	}
	if h, _ := layout.DecodeHeader(b); h.Index != 0 {
		x.rewrite = true // reported by add, which numbers problems
	}
	if in.Free() {
		return x, probs
	}
	switch in.Mode & typeMask {
	case typeReg:
		if in.Flags&layout.FlagInline != 0 {
			if uint64(len(in.Inline)) != in.Size {
				bad("inline file of size %d holds %d inline bytes", in.Size, len(in.Inline))
			}
		} else {
			if in.Size > layout.FileBytesMax {
				bad("size %d exceeds the largest file (%d)", in.Size, uint64(layout.FileBytesMax))
			}
			if len(in.Inline) != 0 {
				bad("file kept in its extent also holds %d inline bytes", len(in.Inline))
			}
		}
	case typeLnk:
		switch {
		case len(in.Inline) == 0 && (in.Size == 0 || in.Size > filesys.SymlinkBytesMax):
			bad("symlink with a target of %d bytes in its extent", in.Size)
		case len(in.Inline) == 0:
			// a long target, kept in the extent
		case uint64(len(in.Inline)) != in.Size:
			bad("symlink of size %d has a target of %d bytes", in.Size, len(in.Inline))
		}
	case typeDir, syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
	default:
		bad("unknown file type %#o", in.Mode&typeMask)
	}
	if in.Mode&typeMask != typeDir && in.Parent != 0 {
		bad("parent field %d set on a non-directory", in.Parent)
	}
	checkACLs(in, bad)
	return x, probs
}

// checkACLs reports stored POSIX ACLs that break filesys/acl.go's
// invariants: every list decodes (one that does not lets no one but the
// owner and root in over NFS), a default list only on a directory, and
// the mode shows what an access list does (its group bits the mask).
// Not repaired: the owner sets the list again.
func checkACLs(in *layout.Inode, bad func(format string, args ...any)) {
	for _, x := range in.Xattrs {
		if x.Name != acl.XattrAccess && x.Name != acl.XattrDefault {
			continue
		}
		a, err := acl.Decode(x.Value)
		switch {
		case err == nil && len(a) == 0:
			bad("%s stored empty", x.Name)
		case err != nil:
			bad("%s does not decode: %v", x.Name, err)
		case x.Name == acl.XattrDefault && in.Mode&typeMask != typeDir:
			bad("%s on a non-directory (mode %#o)", x.Name, in.Mode)
		case x.Name == acl.XattrAccess:
			if m, _ := a.EquivMode(in.Mode); m&0o777 != in.Mode&0o777 {
				bad("mode %#o does not show its %s (%s: mode %#o)", in.Mode&0o777, x.Name, a, m&0o777)
			}
		}
	}
}

// readInode reads and decodes inode ino, with its block's version.
func (c *checker) readInode(ino uint64) (*layout.Inode, uint64, error) {
	b := make([]byte, layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, b, layout.InodeAddr(ino)); err != nil {
		return nil, 0, fmt.Errorf("read inode %d: %w", ino, err)
	}
	in, v, err := layout.DecodeInode(b, ino)
	return in, v, err
}

// writeInode writes in as inode ino's block at version v.
func (c *checker) writeInode(ino, v uint64, in *layout.Inode) error {
	b := make([]byte, layout.BlockBytes)
	if err := layout.EncodeInode(b, ino, v, in); err != nil {
		return err
	}
	if err := c.dev.WriteData(c.ctx, b, layout.InodeAddr(ino)); err != nil {
		return fmt.Errorf("write inode %d: %w", ino, err)
	}
	return nil
}

// checkNameLog checks directory ino's name log (layout/namelog.go: on
// volumes that keep file versions) up to its length: each block's header
// and records, records of no later directory than this one. A bad block
// is cut off with --repair (the log then ends before it: the directory's
// history from there on is lost to .plumeria/at, nothing else).
func (c *checker) checkNameLog(ino uint64, in *layout.Inode, v uint64) error {
	if in.NLog == 0 {
		return nil
	}
	n := in.NLog/layout.PayloadBytes + 1
	if n > layout.NameLogBlocksMax {
		n = layout.NameLogBlocksMax
	}
	buf := make([]byte, n*layout.BlockBytes)
	if err := c.dev.ReadAt(c.ctx, buf, layout.NameLogAddr(ino, 0)); err != nil {
		return fmt.Errorf("read the name log of directory %d: %w", ino, err)
	}
	for blk := uint64(0); blk < n; blk++ {
		limit := layout.PayloadBytes
		if blk == in.NLog/layout.PayloadBytes {
			limit = int(in.NLog % layout.PayloadBytes)
		}
		if limit == 0 {
			continue
		}
		b := buf[blk*layout.BlockBytes : (blk+1)*layout.BlockBytes]
		why := ""
		if h, err := layout.DecodeHeader(b); err != nil || h.Kind != layout.KindNameLog || h.Owner != ino || h.Index != blk {
			why = fmt.Sprintf("header (%v, kind %v, owner %d, index %d)", err, h.Kind, h.Owner, h.Index)
		} else if recs, err := layout.DecodeNameRecords(b[layout.HeaderBytes:], limit); err != nil {
			why = err.Error()
		} else {
			for _, r := range recs {
				if r.DirGen > in.Gen {
					why = fmt.Sprintf("a record of directory generation %d, above the directory's %d", r.DirGen, in.Gen)
					break
				}
			}
		}
		if why == "" {
			continue
		}
		p := c.problem("directory %d: name log block %d: %s", ino, blk, why)
		if c.opts.Repair {
			in.NLog = blk * layout.PayloadBytes
			if err := c.writeInode(ino, v+1, in); err != nil {
				return err
			}
			c.repaired(p, fmt.Sprintf("name log cut to %d bytes", in.NLog))
		}
		return nil
	}
	return nil
}

// ---- the tree ----

// blocks gives filesys/dir directory ino's blocks on the volume, checking
// each header. With stage set, writes are kept in memory until flush.
type blocks struct {
	c      *checker
	ino    uint64
	bad    string            // the first header problem met
	staged map[uint64][]byte // full blocks, new version already set
}

func (d *blocks) raw(n uint64) ([]byte, error) {
	if b := d.staged[n]; b != nil {
		return b, nil
	}
	if n >= layout.DirBlocksMax {
		return nil, fmt.Errorf("directory %d: block %d out of range: %w", d.ino, n, dir.ErrCorrupt)
	}
	b := make([]byte, layout.BlockBytes)
	if err := d.c.dev.ReadAt(d.c.ctx, b, layout.DirBlockAddr(d.ino, n)); err != nil {
		return nil, fmt.Errorf("read directory %d block %d: %w", d.ino, n, err)
	}
	return b, nil
}

func (d *blocks) Read(n uint64) ([]byte, error) {
	b, err := d.raw(n)
	if err != nil {
		return nil, err
	}
	if d.staged[n] != nil {
		return b[layout.HeaderBytes:], nil
	}
	h, err := layout.DecodeHeader(b)
	var why string
	switch {
	case err != nil:
		why = err.Error()
	case h.Kind == layout.KindNone:
		why = "never written, but in use"
	case h.Kind != layout.KindDir || h.Owner != d.ino || h.Index != n:
		why = fmt.Sprintf("a %v block of owner %d index %d", h.Kind, h.Owner, h.Index)
	}
	if why != "" {
		if d.bad == "" {
			d.bad = fmt.Sprintf("directory %d block %d (%#x): %s", d.ino, n, layout.DirBlockAddr(d.ino, n), why)
		}
		return nil, fmt.Errorf("%s: %w", d.bad, dir.ErrCorrupt)
	}
	return b[layout.HeaderBytes:], nil
}

func (d *blocks) Write(n uint64, p []byte) error {
	b, err := d.raw(n)
	if err != nil {
		return err
	}
	if d.staged[n] == nil {
		b = append([]byte(nil), b...)
		layout.PutHeader(b, layout.Header{Kind: layout.KindDir, Version: layout.Version(b) + 1, Owner: d.ino, Index: n})
		d.staged[n] = b
	}
	copy(b[layout.HeaderBytes:], p)
	return nil
}

func (d *blocks) flush() error {
	ns := make([]uint64, 0, len(d.staged))
	for n := range d.staged {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	for _, n := range ns {
		if err := d.c.dev.WriteData(d.c.ctx, d.staged[n], layout.DirBlockAddr(d.ino, n)); err != nil {
			return fmt.Errorf("write directory %d block %d: %w", d.ino, n, err)
		}
	}
	return nil
}

// fix is a repair of one entry of a directory.
type fix struct {
	p      int // the problem it repairs
	e      dir.Entry
	remove bool // else: retype
	typ    uint8
}

// walk goes through the tree from the root, breadth first.
func (c *checker) walk() error {
	root, err := c.get(filesys.RootIno)
	if err != nil {
		return err
	}
	switch {
	case root.bad != "":
		c.problem("root inode %d does not decode: %s", filesys.RootIno, root.bad)
		c.complete = false
		return nil
	case !root.isDir():
		c.problem("root inode %d is not a directory (mode %#o)", filesys.RootIno, root.mode)
		c.complete = false
		return nil
	}
	root.reached, root.listedBy = true, filesys.RootIno
	queue := []uint64{filesys.RootIno}
	for len(queue) > 0 {
		ino := queue[0]
		queue = queue[1:]
		subs, err := c.walkDir(ino)
		if err != nil {
			return err
		}
		queue = append(queue, subs...)
		c.mu.Lock()
		c.dirsDone++
		c.mu.Unlock()
		c.progress("directories")
	}
	return nil
}

// walkDir checks directory ino and its entries and returns the
// subdirectories it reaches first.
func (c *checker) walkDir(ino uint64) ([]uint64, error) {
	in, v, err := c.readInode(ino)
	if err != nil {
		if !errors.Is(err, layout.ErrCorrupt) {
			return nil, err
		}
		c.problem("directory %d does not decode: %v", ino, err)
		c.complete = false
		return nil, nil
	}
	if err := c.checkNameLog(ino, in, v); err != nil {
		return nil, err
	}
	d, err := dir.Decode(in.Inline, layout.InlineBytes-in.XattrBytes())
	if err != nil {
		c.problem("directory %d: its root does not decode: %v", ino, err)
		c.complete = false
		return nil, nil
	}
	bl := &blocks{c: c, ino: ino}
	if err := dir.Check(d, bl); err != nil {
		if !errors.Is(err, dir.ErrCorrupt) {
			return nil, err
		}
		if bl.bad != "" {
			c.problem("%s", bl.bad)
		} else {
			c.problem("directory %d is corrupt: %v", ino, err)
		}
		c.complete = false
		return nil, nil
	}
	var fixes []fix
	var subs []uint64
	self := c.inodes[ino]
	for after := uint64(0); ; {
		ents, done, err := d.List(bl, after, listPage)
		if err != nil {
			if !errors.Is(err, dir.ErrCorrupt) {
				return nil, err
			}
			c.problem("directory %d: listing fails: %v", ino, err)
			c.complete = false
			return subs, nil
		}
		for _, e := range ents {
			f, sub, err := c.entry(ino, e)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fixes = append(fixes, *f)
			}
			if sub != 0 {
				subs = append(subs, sub)
				self.subdirs++
			}
		}
		if len(ents) > 0 {
			after = ents[len(ents)-1].Cookie
		}
		if done {
			break
		}
	}
	if len(fixes) == 0 || !c.opts.Repair {
		return subs, nil
	}
	bl.staged = map[uint64][]byte{}
	for _, f := range fixes {
		if _, err := d.Remove(bl, f.e.Name); err != nil {
			return nil, fmt.Errorf("directory %d: remove %q: %w", ino, f.e.Name, err)
		}
		if !f.remove {
			if err := d.Insert(bl, dir.Entry{Name: f.e.Name, Ino: f.e.Ino, Type: f.typ}); err != nil {
				return nil, fmt.Errorf("directory %d: insert %q: %w", ino, f.e.Name, err)
			}
		}
	}
	if err := bl.flush(); err != nil {
		return nil, err
	}
	in.Inline = d.Encode()
	if err := c.writeInode(ino, v+1, in); err != nil {
		return nil, err
	}
	for _, f := range fixes {
		if f.remove {
			c.repaired(f.p, "entry removed")
		} else {
			c.repaired(f.p, fmt.Sprintf("entry type set to %d", f.typ))
		}
	}
	return subs, nil
}

// entry checks entry e of directory parent. It returns a repair to make
// to the entry, if any, and the entry's inode if it is a directory reached
// for the first time.
func (c *checker) entry(parent uint64, e dir.Entry) (*fix, uint64, error) {
	name := fmt.Sprintf("entry %q of directory %d", e.Name, parent)
	if !layout.ValidIno(e.Ino) {
		return &fix{p: c.problem("%s names inode %d, which cannot exist", name, e.Ino), e: e, remove: true}, 0, nil
	}
	x, err := c.get(e.Ino)
	if err != nil {
		return nil, 0, err
	}
	switch {
	case x.bad != "":
		return &fix{p: c.problem("%s names inode %d, which does not decode: %s", name, e.Ino, x.bad), e: e, remove: true}, 0, nil
	case x.mode == 0:
		return &fix{p: c.problem("%s names inode %d, which is free", name, e.Ino), e: e, remove: true}, 0, nil
	}
	var f *fix
	if typ := uint8(x.mode >> 12); e.Type != typ {
		f = &fix{p: c.problem("%s has type %d, but inode %d has type %d", name, e.Type, e.Ino, typ), e: e, typ: typ}
	}
	if set, known := c.allocated(e.Ino); known && !set {
		p := c.problem("inode %d is in use and named by %s, but free in group %d's bitmap", e.Ino, name, layout.RGOf(e.Ino))
		c.setBit(e.Ino, true)
		if c.opts.Repair {
			c.repaired(p, "bit set")
		}
	}
	if !x.isDir() {
		x.reached = true
		x.links++
		return f, 0, nil
	}
	if x.reached {
		c.problem("directory %d is named again by %s (a hard link to a directory, or a cycle); first reached from directory %d",
			e.Ino, name, x.listedBy)
		return f, 0, nil
	}
	x.reached, x.listedBy = true, parent
	return f, e.Ino, nil
}

// ---- what the walk learned ----

// settle compares link counts, parents and the bitmaps with the walk, and
// frees orphans.
func (c *checker) settle() error {
	inos := make([]uint64, 0, len(c.inodes))
	for ino := range c.inodes {
		inos = append(inos, ino)
	}
	slices.Sort(inos)
	for _, ino := range inos {
		x := c.inodes[ino]
		set, _ := c.allocated(ino)
		switch {
		case x.reached:
			if err := c.settleReached(ino, x); err != nil {
				return err
			}
		case set:
			if err := c.orphan(ino, x); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *checker) settleReached(ino uint64, x *info) error {
	var ps []int
	var hows []string
	wantLinks := x.links
	if x.isDir() {
		wantLinks = 2 + x.subdirs
	}
	if x.nlink != wantLinks {
		if x.isDir() {
			ps = append(ps, c.problem("directory %d: nlink %d, but it has %d subdirectories (want %d)", ino, x.nlink, x.subdirs, wantLinks))
		} else {
			ps = append(ps, c.problem("inode %d: nlink %d, but %d entries name it", ino, x.nlink, x.links))
		}
		hows = append(hows, fmt.Sprintf("nlink set to %d", wantLinks))
	}
	wantParent := x.parent
	if x.isDir() && x.parent != x.listedBy {
		wantParent = x.listedBy
		ps = append(ps, c.problem("directory %d: parent field %d, but directory %d lists it", ino, x.parent, x.listedBy))
		hows = append(hows, fmt.Sprintf("parent set to %d", wantParent))
	}
	if x.rewrite {
		hows = append(hows, "header rewritten")
	}
	if !c.opts.Repair || (len(ps) == 0 && !x.rewrite) {
		return nil
	}
	in, v, err := c.readInode(ino)
	if err != nil {
		return fmt.Errorf("inode %d: %w", ino, err)
	}
	in.Nlink, in.Parent = wantLinks, wantParent
	if err := c.writeInode(ino, v+1, in); err != nil {
		return err
	}
	x.nlink, x.parent = wantLinks, wantParent
	if x.rewrite {
		ps = append(ps, x.rewriteP)
		x.rewrite = false
	}
	for _, p := range ps {
		c.repaired(p, strings.Join(hows, ", "))
	}
	return nil
}

// orphan handles ino, allocated in its group but not reached by the walk.
func (c *checker) orphan(ino uint64, x *info) error {
	var p int
	switch {
	case x.bad != "":
		p = c.problem("inode %d is allocated but unreachable, and does not decode: %s", ino, x.bad)
	case x.mode == 0:
		p = c.problem("inode %d is allocated in group %d but its block is free", ino, layout.RGOf(ino))
	default:
		p = c.problem("inode %d (type %#o, %d links, %d bytes extent) is allocated but unreachable: an orphan", ino, x.mode&typeMask, x.nlink, x.hwm)
	}
	if !c.opts.Repair {
		return nil
	}
	if !c.complete {
		c.log.Warn("fsck: orphan kept: part of the tree could not be walked", "ino", ino)
		return nil
	}
	how := "bit cleared"
	if x.mode != 0 || x.bad != "" || x.rewrite {
		// Free the inode as filesys does: keep the generation and the
		// high-water mark, and decommit the extent.
		b := make([]byte, layout.BlockBytes)
		if err := c.dev.ReadAt(c.ctx, b, layout.InodeAddr(ino)); err != nil {
			return fmt.Errorf("read inode %d: %w", ino, err)
		}
		free := &layout.Inode{Gen: x.gen, HWM: x.hwm, FVer: x.fver, NLog: x.nlog}
		clearBytes := x.hwm
		if x.bad != "" {
			// Nothing is known of its extent: clear all of it, which
			// leaves nothing for the next user to clear.
			clearBytes, free.HWM = layout.FileBytesMax, 0
		}
		vdev, _ := c.dev.(filesys.VersionDevice)
		if vdev != nil && !vdev.KeepsVersions() {
			vdev = nil
		}
		if vdev != nil && x.bad != "" {
			// Its fver is unknown: take it from the versions its history
			// block holds (data is written at most one above the last).
			fvers, err := vdev.BlockVersions(c.ctx, layout.ExtentAddr(ino)+layout.HistoryOff)
			if err != nil {
				return fmt.Errorf("list the versions of inode %d: %w", ino, err)
			}
			if len(fvers) > 0 {
				free.FVer = fvers[len(fvers)-1] + 1
			}
		}
		if clearBytes > 0 {
			var err error
			if vdev != nil {
				// Above its last version: versions stay, and the next
				// user's writes (at fver+1) come after (filesys/versions.go).
				err = vdev.DecommitVersion(c.ctx, layout.ExtentAddr(ino), clearBytes, free.FVer+1)
			} else {
				err = c.dev.Decommit(c.ctx, layout.ExtentAddr(ino), clearBytes)
			}
			if err != nil {
				return fmt.Errorf("decommit the extent of inode %d: %w", ino, err)
			}
		}
		if err := c.writeInode(ino, layout.Version(b)+1, free); err != nil {
			return err
		}
		how = fmt.Sprintf("freed (%d bytes of its extent decommitted)", clearBytes)
	}
	c.setBit(ino, false)
	x.mode, x.bad = 0, ""
	c.repaired(p, how)
	if x.rewrite {
		c.repaired(x.rewriteP, "inode freed")
	}
	return nil
}
