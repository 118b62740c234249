package chaos

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/test/chaos/check"
)

// crashStats are the recovery times measured.
type crashStats struct {
	remount []time.Duration // kill → the node mounted again under its name
	other   []time.Duration // kill → another node read the tree
}

func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	r := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	return fmt.Sprintf("n=%d min %s median %s max %s mean %s", len(s), r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]), r(sum/time.Duration(len(s))))
}

// TestCrashPoints kills an fs node at random points of a metadata-heavy
// workload, many times, on a loopback cluster. After each kill the tree
// is read back (alternately by the other node, which must wait for the
// dead node's log to be recovered, and by the node remounted under its
// name) and must be the tree after a prefix of the operations that keeps
// everything before the last fsync (check.Recovered); fsck must be clean.
func TestCrashPoints(t *testing.T) {
	needRoot(t)
	iters := *flagCrashIters
	if iters <= 0 {
		iters = 5
		if long() {
			iters = 200
		}
	}
	fsckEvery := 1 // fsck after every crash point; long mode: every 10th
	if long() {
		fsckEvery = 10
	}
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64()%1_000_000_000 + 1
	}
	w := newWorld(t, fmt.Sprintf("crash seed=%d", seed), seed,
		clusterOpts{servers: 3, coordinators: 1, fsNodes: 2, replicas: 2, fileVersions: true})
	w.logf("crash points: seed %d, %d iterations (replay: make chaos SEED=%d)", seed, iters, seed)
	w.startCluster()
	a, b := w.fs["f1"], w.fs["f2"]
	var st crashStats
	var found []check.Anomaly
	checked := 0
	for i := 0; i < iters && !t.Failed(); i++ {
		if d, ok := t.Deadline(); ok && time.Until(d) < 2*time.Minute {
			w.note(fmt.Sprintf("crash points: stopped after %d of %d iterations, close to the test deadline", i, iters))
			break
		}
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		an, n := w.crashPoint(i, rng, a, b, &st)
		checked += n
		if an != nil {
			an.Detail = fmt.Sprintf("iteration %d (seed %d): %s", i, seed, an.Detail)
			found = append(found, *an)
			break
		}
		if (i+1)%fsckEvery == 0 || i == iters-1 {
			for _, f := range []*fsNode{a, b} {
				if err := f.unmount(); err != nil {
					found = append(found, check.Anomaly{Kind: "unmount failed", Key: f.name, Detail: err.Error()})
				}
			}
			if err := w.fsck(); err != nil {
				a := fsckAnomaly(err)
				a.Detail = fmt.Sprintf("after crash point %d: %s", i, a.Detail)
				found = append(found, a)
				break
			}
			w.fault("fsck")
			if i < iters-1 {
				for _, f := range []*fsNode{a, b} {
					if err := f.mount(); err != nil {
						w.fatal(err)
					}
				}
			}
		}
	}
	w.mu.Lock()
	w.sum.Checked("crash-point operations", checked)
	w.sum.Note("crash points: kill → remounted under the same name: " + durStats(st.remount))
	w.sum.Note("crash points: kill → tree read by the other node (its recovery of the dead node's log): " + durStats(st.other))
	w.mu.Unlock()
	if _, up := a.state(); up {
		a.unmount()
	}
	if _, up := b.state(); up {
		b.unmount()
	}
	w.scanLogs()
	sum := w.report(found)
	addSummary(sum)
}

// crashPoint runs one iteration: workload on a, kill at a random point,
// read back, compare. It returns an anomaly or nil and the number of
// operations checked.
func (w *world) crashPoint(i int, rng *rand.Rand, a, b *fsNode, st *crashStats) (*check.Anomaly, int) {
	root := fmt.Sprintf("it%d", i)
	res, ok := w.call(a, func(mnt string) (string, error) {
		if err := os.Mkdir(filepath.Join(mnt, root), 0o755); err != nil {
			return "", err
		}
		return "", fsyncDir(mnt)
	})
	if !ok || res.err != nil {
		return &check.Anomaly{Kind: "workload", Key: root, Detail: fmt.Sprintf("mkdir %s on %s: %v", root, a.name, res.err)}, 0
	}
	killAfter := time.Duration(200+rng.IntN(2800)) * time.Millisecond
	killed := make(chan time.Time, 1)
	go func() {
		time.Sleep(killAfter)
		a.kill()
		killed <- time.Now()
	}()
	// A file-system snapshot taken at a random moment of the workload
	// (before or across the kill) must hold the tree after a prefix of the
	// operations that keeps every one that returned before it started, and
	// none issued after it returned (the barrier: snapshot.go).
	var prog opProgress
	snapName := fmt.Sprintf("cp%d", i)
	snapAfter := time.Duration(50+rng.IntN(int(killAfter/time.Millisecond))) * time.Millisecond
	snapped := make(chan snapWindow, 1)
	go func() {
		time.Sleep(snapAfter)
		win := snapWindow{done: int(prog.done.Load())}
		_, win.err = w.cli(2*time.Minute, "snapshot", "create", w.coordArg(), "--volume", volumeName, snapName)
		win.started, win.doneAtEnd, win.end = int(prog.started.Load()), int(prog.done.Load()), time.Now()
		snapped <- win
	}()
	ops, after, synced, bad := w.treeWorkload(a, root, rng, &prog)
	killedAt := <-killed
	w.fault("kill-fs (crash point)")
	if bad != nil {
		return bad, len(ops)
	}
	// Alternate who reads first: the other node (it must wait for the
	// dead node's log to be recovered), or the node remounted.
	reader := b
	if i%2 == 1 {
		if err := a.mount(); err != nil {
			return &check.Anomaly{Kind: "no recovery", Key: a.name, Detail: err.Error()}, len(ops)
		}
		st.remount = append(st.remount, time.Since(killedAt))
		reader = a
	}
	snap, err := w.snapshot(reader, root)
	if err != nil {
		return &check.Anomaly{Kind: "no recovery", Key: root, Detail: fmt.Sprintf("read the tree on %s: %v", reader.name, err)}, len(ops)
	}
	if reader == b {
		st.other = append(st.other, time.Since(killedAt))
		if err := a.mount(); err != nil {
			return &check.Anomaly{Kind: "no recovery", Key: a.name, Detail: err.Error()}, len(ops)
		}
		st.remount = append(st.remount, time.Since(killedAt))
	}
	k, an := check.Recovered(ops, synced, snap)
	w.logf("crash point %d: killed after %v, %d operations (%d before the last fsync); read on %s: the tree after %d of them",
		i, killAfter, len(ops), synced, reader.name, k)
	if an == nil {
		win := <-snapped
		if win.end.After(killedAt) {
			// The node may have died before it settled: what it had not
			// fsync'd died with it, as in any crash.
			win.done = min(win.done, synced)
		}
		an = w.checkSnapshot(reader, root, snapName, ops, win)
	}
	if an == nil && synced > 0 {
		an = w.checkPast(reader, root, ops, after, rng.IntN(synced))
	}
	if an != nil {
		var tail []string
		for j := max(0, synced-3); j < len(ops); j++ {
			tail = append(tail, fmt.Sprintf("%4d %s", j, ops[j]))
		}
		an.Detail += fmt.Sprintf("\n  kill after %v; read on %s; operations from 3 before the last fsync:\n    %s",
			killAfter, reader.name, strings.Join(tail, "\n    "))
	}
	return an, len(ops)
}

// opProgress counts a workload's operations as they are issued and as
// they return, for a snapshot taken meanwhile.
type opProgress struct{ started, done atomic.Int64 }

// snapWindow is what a snapshot taken during a workload may hold: at
// least the done operations that returned before it started (of a node
// killed before the snapshot was taken, only those it had fsync'd), at
// most the started ones issued before it returned (doneAtEnd had returned
// by then).
type snapWindow struct {
	done, started, doneAtEnd int
	end                      time.Time // when snapshot create returned
	err                      error
}

// checkSnapshot reads snapshot snap's copy of root on f (through
// .plumeria/snapshots), checks it against the operations its window
// allows, and deletes the snapshot.
func (w *world) checkSnapshot(f *fsNode, root, snap string, ops []check.TreeOp, win snapWindow) *check.Anomaly {
	if win.err != nil {
		// Refused or timed out (the node died while it settled): no
		// snapshot to check; none half made either.
		w.logf("crash point snapshot %s not taken: %v", snap, win.err)
		if out, err := w.cli(time.Minute, "snapshot", "list", w.coordArg(), "--volume", volumeName); err == nil && strings.Contains(out, snap+" ") {
			w.cli(time.Minute, "snapshot", "delete", w.coordArg(), "--volume", volumeName, snap)
		}
		return nil
	}
	got, err := w.snapshot(f, filepath.Join(".plumeria", "snapshots", snap, root))
	if err != nil {
		return &check.Anomaly{Kind: "snapshot", Key: snap, Detail: fmt.Sprintf("read snapshot %s on %s: %v", snap, f.name, err)}
	}
	upTo := slices.Clone(ops[:min(win.started, len(ops))])
	if n := len(upTo); n > win.doneAtEnd && n > 0 {
		upTo[n-1].Outcome = check.Unknown // in flight while the snapshot was taken
	}
	k, an := check.Recovered(upTo, win.done, got)
	if an != nil {
		an.Kind, an.Key = "snapshot", snap
		an.Detail = fmt.Sprintf("snapshot %s taken while %d operations had returned and %d were issued: %s", snap, win.done, win.started, an.Detail)
		return an
	}
	w.logf("crash point snapshot %s: taken between operations %d and %d: the tree after %d of them", snap, win.done, win.started, k)
	w.mu.Lock()
	w.sum.Checked("snapshots of crash points", 1)
	w.mu.Unlock()
	if _, err := w.cli(time.Minute, "snapshot", "delete", w.coordArg(), "--volume", volumeName, snap); err != nil {
		return &check.Anomaly{Kind: "snapshot", Key: snap, Detail: fmt.Sprintf("delete: %v", err)}
	}
	return nil
}

// checkPast reads root as it was right after operation k returned,
// through MNT/.plumeria/at/T on f (the volume keeps file versions), and
// checks it against the model after ops[:k+1]: every name then, each file
// as its last close left it (check.Tree.Past). Operation k returned
// before the last fsync, so the crash cannot have taken it.
func (w *world) checkPast(f *fsNode, root string, ops []check.TreeOp, after []time.Time, k int) *check.Anomaly {
	model := check.NewTree()
	for _, op := range ops[:k+1] {
		if err := model.Apply(op); err != nil {
			return &check.Anomaly{Kind: "workload", Key: op.Path, Detail: err.Error()}
		}
	}
	at := after[k].UTC().Format(time.RFC3339Nano)
	got, err := w.snapshot(f, filepath.Join(".plumeria", "at", at, root))
	if err != nil {
		return &check.Anomaly{Kind: "time travel", Key: root, Detail: fmt.Sprintf("read %s at %s on %s: %v", root, at, f.name, err)}
	}
	if diff := check.Diff(model.Past(), check.PastOf(got), "", 10); len(diff) > 0 {
		return &check.Anomaly{Kind: "time travel", Key: root,
			Detail: fmt.Sprintf("%s at %s (after operation %d of %d) differs from the model:\n    %s", root, at, k, len(ops), strings.Join(diff, "\n    "))}
	}
	w.logf("crash point time travel: %s after operation %d of %d (at %s) as the model says", root, k, len(ops), at)
	w.mu.Lock()
	w.sum.Checked("time-travel reads of crash points", 1)
	w.mu.Unlock()
	return nil
}

// treeWorkload issues valid random operations on f under root until one
// fails (the kill). It returns them, when each had returned (after[i]:
// taken after operation i returned and before i+1 was issued), how many
// returned before the last fsync returned, and an anomaly if an operation
// failed before the kill. prog counts them as they go.
func (w *world) treeWorkload(f *fsNode, root string, rng *rand.Rand, prog *opProgress) ([]check.TreeOp, []time.Time, int, *check.Anomaly) {
	model := check.NewTree()
	var ops []check.TreeOp
	var after []time.Time
	synced := 0
	defer func() { prog.done.Store(int64(len(ops))) }()
	for n := 0; ; n++ {
		op := nextTreeOp(model, rng, n)
		prog.started.Store(int64(n + 1))
		res, ok := w.call(f, func(mnt string) (string, error) { return "", doTreeOp(filepath.Join(mnt, root), op) })
		if !ok {
			return ops, after, synced, nil // killed between two operations
		}
		if res.err != nil {
			op.Outcome, op.Err = check.Unknown, res.err.Error()
			ops = append(ops, op)
			after = append(after, time.Now())
			if _, up := f.state(); up && !res.overlapped {
				return ops, after, synced, &check.Anomaly{Kind: "unexpected error", Key: op.Path,
					Detail: fmt.Sprintf("operation %d %s failed before the kill", n, op)}
			}
			return ops, after, synced, nil
		}
		if err := model.Apply(op); err != nil {
			return ops, after, synced, &check.Anomaly{Kind: "workload", Key: op.Path, Detail: err.Error()}
		}
		ops = append(ops, op)
		after = append(after, time.Now())
		prog.done.Store(int64(len(ops)))
		if op.Kind == "fsync" {
			synced = len(ops)
		}
	}
}

// nextTreeOp draws a valid operation for the model's tree.
func nextTreeOp(t *check.Tree, rng *rand.Rand, n int) check.TreeOp {
	names := t.Names()
	var dirs, files, entries []string
	dirs = append(dirs, "")
	for _, name := range names {
		switch t.Kind(name) {
		case 'd':
			dirs = append(dirs, name)
		case 'f':
			files = append(files, name)
		}
		entries = append(entries, name)
	}
	join := func(d, name string) string {
		if d == "" {
			return name
		}
		return d + "/" + name
	}
	newName := func() string { return join(dirs[rng.IntN(len(dirs))], fmt.Sprintf("n%d", n)) }
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	for {
		switch x := rng.IntN(100); {
		case x < 12:
			return check.TreeOp{Kind: "mkdir", Path: newName(), Mode: 0o755}
		case x < 30:
			return check.TreeOp{Kind: "create", Path: newName(), Mode: 0o644}
		case x < 40:
			var empty []string
			for _, f := range files {
				if t.Size(f) == 0 {
					empty = append(empty, f)
				}
			}
			if len(empty) > 0 {
				data := strings.Repeat(fmt.Sprintf("op %d data ", n), 1+rng.IntN(400))
				return check.TreeOp{Kind: "write", Path: pick(empty), Data: data}
			}
		case x < 55:
			if len(entries) > 0 {
				from := pick(entries)
				to := newName()
				if t.Kind(from) == 'f' && len(files) > 1 && rng.IntN(2) == 0 {
					to = pick(files) // replace an existing file
				}
				if to == from || strings.HasPrefix(to+"/", from+"/") || (t.Kind(to) == 'f' && t.Links(to) > 1) {
					continue
				}
				return check.TreeOp{Kind: "rename", Path: from, To: to}
			}
		case x < 60:
			if len(files) > 0 {
				return check.TreeOp{Kind: "link", Path: pick(files), To: newName()}
			}
		case x < 65:
			return check.TreeOp{Kind: "symlink", Path: newName(), Data: fmt.Sprintf("target-%d", n)}
		case x < 73:
			var gone []string
			for _, e := range entries {
				if k := t.Kind(e); k == 'f' || k == 'l' {
					gone = append(gone, e)
				}
			}
			if len(gone) > 0 {
				return check.TreeOp{Kind: "unlink", Path: pick(gone)}
			}
		case x < 77:
			var empty []string
			for _, d := range dirs[1:] {
				if len(t.Children(d)) == 0 {
					empty = append(empty, d)
				}
			}
			if len(empty) > 0 {
				return check.TreeOp{Kind: "rmdir", Path: pick(empty)}
			}
		case x < 82:
			if len(files) > 0 {
				return check.TreeOp{Kind: "chmod", Path: pick(files), Mode: []uint32{0o600, 0o640, 0o644, 0o700, 0o755}[rng.IntN(5)]}
			}
		case x < 86:
			var full []string
			for _, f := range files {
				if t.Size(f) > 0 {
					full = append(full, f)
				}
			}
			if len(full) > 0 {
				f := pick(full)
				return check.TreeOp{Kind: "truncate", Path: f, Size: rng.IntN(t.Size(f))}
			}
		default:
			if len(entries) > 0 {
				e := pick(entries)
				if t.Kind(e) != 'l' {
					return check.TreeOp{Kind: "fsync", Path: e}
				}
			}
		}
	}
}

// doTreeOp carries op out under dir.
func doTreeOp(dir string, op check.TreeOp) error {
	p := filepath.Join(dir, op.Path)
	switch op.Kind {
	case "mkdir":
		return os.Mkdir(p, fs.FileMode(op.Mode))
	case "create":
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fs.FileMode(op.Mode))
		if err != nil {
			return err
		}
		return f.Close()
	case "write":
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(op.Data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case "rename":
		return os.Rename(p, filepath.Join(dir, op.To))
	case "link":
		return os.Link(p, filepath.Join(dir, op.To))
	case "symlink":
		return os.Symlink(op.Data, p)
	case "unlink":
		return os.Remove(p)
	case "rmdir":
		return syscall.Rmdir(p)
	case "chmod":
		return os.Chmod(p, fs.FileMode(op.Mode))
	case "truncate":
		return os.Truncate(p, int64(op.Size))
	case "fsync":
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return fmt.Errorf("unknown operation %q", op.Kind)
}

// snapshot reads the tree under root on f's mount.
func (w *world) snapshot(f *fsNode, root string) (check.Snapshot, error) {
	res, ok := w.call(f, func(mnt string) (string, error) {
		snap, err := readTree(filepath.Join(mnt, root))
		if err != nil {
			return "", err
		}
		return encodeSnapshot(snap), nil
	})
	if !ok {
		return nil, errors.New("node down")
	}
	if res.err != nil {
		return nil, res.err
	}
	return decodeSnapshot(res.val), nil
}

func readTree(top string) (check.Snapshot, error) {
	snap := check.Snapshot{}
	groups := map[uint64][]string{}
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == top {
			return nil
		}
		rel, _ := filepath.Rel(top, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		e := check.Entry{Mode: st.Mode & 0o7777}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			e.Kind = 'd'
		case syscall.S_IFREG:
			e.Kind = 'f'
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Data = string(b)
			// By inode number, whatever the link count says (a view of
			// the past shows 1: filesys/history/timeview.go).
			groups[st.Ino] = append(groups[st.Ino], rel)
		case syscall.S_IFLNK:
			e.Kind, e.Mode = 'l', 0
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Data = t
		default:
			e.Kind = '?'
		}
		snap[rel] = e
		return nil
	})
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		m := slices.Min(g)
		for _, name := range g {
			e := snap[name]
			e.Link = m
			snap[name] = e
		}
	}
	return snap, err
}

// A snapshot crosses the call boundary as a string (call's contract).
func encodeSnapshot(s check.Snapshot) string {
	var b strings.Builder
	for name, e := range s {
		fmt.Fprintf(&b, "%q %c %o %q %q\n", name, e.Kind, e.Mode, e.Data, e.Link)
	}
	return b.String()
}

func decodeSnapshot(s string) check.Snapshot {
	out := check.Snapshot{}
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if line == "" {
			continue
		}
		var name, data, link string
		var kind byte
		var mode uint32
		fmt.Sscanf(line, "%q %c %o %q %q", &name, &kind, &mode, &data, &link)
		out[name] = check.Entry{Kind: kind, Mode: mode, Data: data, Link: link}
	}
	return out
}
