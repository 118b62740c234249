package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/test/chaos/check"
)

// opTimeout bounds one operation on a mount. Operations may wait out a
// dead node's lease (15 s) and its recovery; longer counts as unknown.
const opTimeout = 45 * time.Second

// result is what one call on a mount gave.
type result struct {
	start, end time.Duration
	val        string
	err        error
	timedOut   bool
	overlapped bool // the node crashed or was remounted meanwhile
}

// call runs fn on f's mount point, giving up after opTimeout (fn then
// runs on, abandoned). ok is false when the node was down: nothing ran.
func (w *world) call(f *fsNode, fn func(mnt string) (string, error)) (r result, ok bool) {
	gen, up := f.state()
	if !up {
		return r, false
	}
	type out struct {
		v   string
		err error
	}
	done := make(chan out, 1)
	r.start = w.now()
	go func() {
		v, err := fn(f.mnt)
		done <- out{v, err}
	}()
	select {
	case o := <-done:
		r.end, r.val, r.err = w.now(), o.v, o.err
	case <-time.After(opTimeout):
		r.timedOut, r.err = true, fmt.Errorf("no answer within %v", opTimeout)
	}
	gen2, up2 := f.state()
	r.overlapped = gen2 != gen || !up2
	return r, true
}

// recorder collects a workload's operations.
type recorder struct {
	mu  sync.Mutex
	ops []check.Op
}

func (r *recorder) add(op check.Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
}

func (r *recorder) all() []check.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pause waits a little between operations, or returns false when ctx ends.
func pause(ctx context.Context, rng *rand.Rand, maxMs int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(rng.IntN(maxMs+1)) * time.Millisecond):
		return true
	}
}

func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// createFile creates path exclusively with data, noting its inode number.
func (w *world) createFile(f *fsNode, path, what string, data []byte) error {
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w.noteInode(fd, f, what)
	_, err = fd.Write(data)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	return err
}

// noteInode remembers which workload file got an inode number, so that
// fsck's findings can be traced back to it.
func (w *world) noteInode(fd *os.File, f *fsNode, what string) {
	var st syscall.Stat_t
	if syscall.Fstat(int(fd.Fd()), &st) != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inodes == nil {
		w.inodes = map[uint64][]string{}
	}
	l := append(w.inodes[st.Ino], fmt.Sprintf("%s on %s (incarnation %d) at %.3fs", what, f.name, f.incarnation(), w.now().Seconds()))
	w.inodes[st.Ino] = l[max(0, len(l)-3):]
}

// inodeNotes annotates the inode numbers mentioned in text.
func (w *world) inodeNotes(text string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	seen := map[uint64]bool{}
	for _, word := range strings.Fields(text) {
		n, err := strconv.ParseUint(word, 10, 64)
		if err != nil || seen[n] || w.inodes[n] == nil {
			continue
		}
		seen[n] = true
		out = append(out, fmt.Sprintf("inode %d was created as: %s", n, strings.Join(w.inodes[n], "; then ")))
	}
	return strings.Join(out, "\n")
}

// ---- register workload ----

const registerInit = "init"

// registerWL: keys reg/k0..kN, replaced whole by temp file + rename +
// fsync of the directory, read whole, from every mount.
type registerWL struct {
	w        *world
	keys     []string
	rec      recorder
	mu       sync.Mutex
	enoent   []check.Op // reads that found no file: the known rename_atomic gap
	restarts int
}

// beforeRename marks an error that happened before the rename: the write
// took no effect.
type beforeRename struct{ error }

func (r *registerWL) setup(f *fsNode, keys int) error {
	for i := range keys {
		r.keys = append(r.keys, fmt.Sprintf("k%d", i))
	}
	res, ok := r.w.call(f, func(mnt string) (string, error) {
		dir := filepath.Join(mnt, "reg")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		for _, k := range r.keys {
			tmp := filepath.Join(dir, ".init."+k)
			if err := os.WriteFile(tmp, []byte(registerInit), 0o644); err != nil {
				return "", err
			}
			if err := os.Rename(tmp, filepath.Join(dir, k)); err != nil {
				return "", err
			}
		}
		return "", fsyncDir(dir)
	})
	if !ok || res.err != nil {
		return fmt.Errorf("register setup on %s: %v", f.name, res.err)
	}
	return nil
}

func (r *registerWL) worker(ctx context.Context, client int, f *fsNode, rng *rand.Rand) {
	for seq := 0; pause(ctx, rng, 20); seq++ {
		key := r.keys[rng.IntN(len(r.keys))]
		if rng.IntN(2) == 0 {
			r.write(client, f, key, seq)
		} else {
			r.read(client, f, key)
		}
	}
}

func (r *registerWL) write(client int, f *fsNode, key string, seq int) {
	v := fmt.Sprintf("%s.c%d.%d", f.name, client, seq)
	inc := f.incarnation()
	res, ok := r.w.call(f, func(mnt string) (string, error) {
		dir := filepath.Join(mnt, "reg")
		tmp := filepath.Join(dir, fmt.Sprintf(".tmp.%s.c%d.%d", f.name, client, seq))
		if err := r.w.createFile(f, tmp, "register "+key+"="+v, []byte(v)); err != nil {
			os.Remove(tmp)
			return "", beforeRename{err}
		}
		if err := os.Rename(tmp, filepath.Join(dir, key)); err != nil {
			os.Remove(tmp)
			return "", err
		}
		at := r.w.now()
		err := fsyncDir(dir)
		if err == nil {
			r.w.noteSync(f, inc, at)
		}
		return "", err
	})
	if !ok {
		time.Sleep(100 * time.Millisecond)
		return
	}
	op := check.Op{Client: client, Node: f.name, Inc: inc, Kind: check.Write, Key: key, Value: v, Start: res.start, End: res.end, Err: errString(res.err)}
	var br beforeRename
	switch {
	case res.err == nil:
		op.Outcome = check.OK
	case !res.timedOut && errors.As(res.err, &br):
		op.Outcome = check.Failed
	default:
		op.Outcome = check.Unknown
	}
	r.rec.add(op)
}

func (r *registerWL) read(client int, f *fsNode, key string) {
	inc := f.incarnation()
	res, ok := r.w.call(f, func(mnt string) (string, error) {
		b, err := os.ReadFile(filepath.Join(mnt, "reg", key))
		return string(b), err
	})
	if !ok {
		time.Sleep(100 * time.Millisecond)
		return
	}
	op := check.Op{Client: client, Node: f.name, Inc: inc, Kind: check.Read, Key: key, Value: res.val, Start: res.start, End: res.end, Err: errString(res.err)}
	switch {
	case res.err == nil:
		op.Outcome = check.OK
	case res.timedOut:
		op.Outcome = check.Unknown
	default:
		op.Outcome = check.Failed
		if errors.Is(res.err, fs.ErrNotExist) && !res.overlapped {
			r.mu.Lock()
			r.enoent = append(r.enoent, op)
			r.mu.Unlock()
		}
	}
	r.rec.add(op)
}

// check runs porcupine and returns the anomalies; ENOENT reads of keys
// that always exist are the known rename_atomic gap (docs/status.md).
func (r *registerWL) check(w *world) []check.Anomaly {
	ops := r.rec.all()
	res := check.Register(ops, registerInit, time.Minute)
	w.mu.Lock()
	w.sum.Checked("register", res.Ops)
	w.mu.Unlock()
	if len(res.Unchecked) > 0 {
		w.note(fmt.Sprintf("register: porcupine timed out on keys %v of seed %d (neither proved nor refuted)", res.Unchecked, w.seed))
	}
	out := res.Anomalies
	for i, a := range out {
		if a.Kind != "read of a value never written" {
			continue
		}
		read := a.History[len(a.History)-1]
		for _, op := range a.History[:len(a.History)-1] {
			if op.Node != read.Node {
				// A file open on one node and renamed over on another
				// keeps its contents until closed (filesys/iopen.go);
				// a lookup never returns another file (names.go Lookup).
				out[i].Detail += " (a rename over the key from another node was under way: the reader must still read " +
					"the file it opened, filesys/iopen.go, and its lookup must not return another file, filesys/names.go)"
				break
			}
		}
	}
	for _, a := range res.Anomalies {
		if a.Kind == "linearizability" {
			path := filepath.Join(w.dir, "register-"+a.Key+".html")
			if f, err := os.Create(path); err == nil {
				check.VisualizeRegister(ops, registerInit, a.Key, time.Minute, f)
				f.Close()
				w.logf("porcupine visualization of %s: %s", a.Key, path)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.enoent) > 0 {
		out = append(out, check.Anomaly{Kind: "read ENOENT on an existing key", Key: "reg",
			Detail: fmt.Sprintf("%d reads found no file although every key always exists (renames replace it atomically: "+
				"posixtest rename_atomic); first ones:", len(r.enoent)), History: r.enoent[:min(5, len(r.enoent))]})
	}
	return out
}

// ---- set workload ----

// setWL: elements are files in set/, created, renamed once, unlinked,
// each step from a random mount.
type setWL struct {
	w   *world
	rec recorder
}

type setElem struct {
	base    string
	renamed bool
}

func (s *setWL) setup(f *fsNode) error {
	res, ok := s.w.call(f, func(mnt string) (string, error) {
		dir := filepath.Join(mnt, "set")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		return "", fsyncDir(dir)
	})
	if !ok || res.err != nil {
		return fmt.Errorf("set setup on %s: %v", f.name, res.err)
	}
	return nil
}

func (s *setWL) worker(ctx context.Context, client int, rng *rand.Rand) {
	var live []*setElem
	for seq := 0; pause(ctx, rng, 30); seq++ {
		f := s.w.randomUp(rng)
		if f == nil {
			continue
		}
		if len(live) == 0 || rng.IntN(10) < 4 {
			e := &setElem{base: fmt.Sprintf("c%d-%d", client, seq)}
			if s.step(client, f, check.Create, e, "", e.base) {
				live = append(live, e)
			}
			continue
		}
		i := rng.IntN(len(live))
		e := live[i]
		var ok bool
		if !e.renamed && rng.IntN(2) == 0 {
			if ok = s.step(client, f, check.Rename, e, e.base, e.base+".r"); ok {
				e.renamed = true
			}
		} else {
			name := e.base
			if e.renamed {
				name += ".r"
			}
			ok = s.step(client, f, check.Unlink, e, "", name)
			if ok {
				live = slices.Delete(live, i, i+1)
			}
		}
		if !ok { // unknown or not run: leave the element alone from now on
			if i < len(live) && live[i] == e {
				live = slices.Delete(live, i, i+1)
			}
		}
	}
}

// step runs one operation and records it; it returns true if it is known
// to have happened.
func (s *setWL) step(client int, f *fsNode, kind check.Kind, e *setElem, from, to string) bool {
	inc := f.incarnation()
	res, ok := s.w.call(f, func(mnt string) (string, error) {
		dir := filepath.Join(mnt, "set")
		switch kind {
		case check.Create:
			return "", s.w.createFile(f, filepath.Join(dir, to), "set element "+to, []byte(to))
		case check.Rename:
			return "", os.Rename(filepath.Join(dir, from), filepath.Join(dir, to))
		default:
			return "", os.Remove(filepath.Join(dir, to))
		}
	})
	if !ok {
		return false
	}
	op := check.Op{Client: client, Node: f.name, Inc: inc, Kind: kind, Key: e.base, From: from, To: to, Start: res.start, End: res.end,
		Err: errString(res.err), Outcome: check.OK}
	if res.err != nil {
		op.Outcome = check.Unknown
	}
	s.rec.add(op)
	return res.err == nil
}

// check lists set/ on every mount and checks the listings.
func (s *setWL) check(w *world) []check.Anomaly {
	listings := map[string][]string{}
	var out []check.Anomaly
	for _, name := range w.fsOrd {
		res, ok := w.call(w.fs[name], func(mnt string) (string, error) {
			des, err := os.ReadDir(filepath.Join(mnt, "set"))
			if err != nil {
				return "", err
			}
			var names []string
			for _, de := range des {
				names = append(names, de.Name())
			}
			return strings.Join(names, "\n"), nil
		})
		if ok && res.err == nil {
			listings[name] = strings.Fields(res.val)
		} else {
			out = append(out, check.Anomaly{Kind: "final listing failed", Key: name, Detail: fmt.Sprintf("list set/ on %s: up %v, %v", name, ok, res.err)})
		}
	}
	res := check.Set(check.NotSynced(s.rec.all(), w.crashed, w.syncedFrom), listings)
	w.mu.Lock()
	w.sum.Checked("set", res.Ops)
	w.mu.Unlock()
	return append(out, res.Anomalies...)
}

// ---- fsync durability workload ----

// durWL: each fs node appends to a file of its own, fsyncing now and
// then; a new file per incarnation. After recovery another node reads
// every file.
type durWL struct {
	w     *world
	mu    sync.Mutex
	files []*durFile
}

type durFile struct {
	check.DurableFile
	node     *fsNode
	inc      int
	errored  bool          // a write or fsync failed or timed out
	syncedAt time.Duration // when the last fsync that returned OK returned
	lastErr  string
}

func (d *durWL) setup(f *fsNode) error {
	res, ok := d.w.call(f, func(mnt string) (string, error) { return "", os.Mkdir(filepath.Join(mnt, "dur"), 0o755) })
	if !ok || res.err != nil {
		return fmt.Errorf("durable setup on %s: %v", f.name, res.err)
	}
	return nil
}

func (d *durWL) worker(ctx context.Context, f *fsNode, rng *rand.Rand) {
	for k := 0; ctx.Err() == nil; k++ {
		if _, up := f.state(); !up {
			pause(ctx, rng, 300)
			continue
		}
		df := &durFile{node: f, inc: f.incarnation()}
		df.Node = f.name
		df.Path = fmt.Sprintf("dur/%s.%d.%d", f.name, df.inc, k)
		var fd *os.File
		res, ok := d.w.call(f, func(mnt string) (string, error) {
			var err error
			fd, err = os.OpenFile(filepath.Join(mnt, df.Path), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
			if err == nil {
				d.w.noteInode(fd, f, df.Path)
			}
			return "", err
		})
		if !ok || res.err != nil {
			pause(ctx, rng, 300)
			continue
		}
		d.mu.Lock()
		d.files = append(d.files, df)
		d.mu.Unlock()
		d.appendTo(ctx, df, fd, rng)
		go fd.Close() // may hang on a dead mount
	}
}

// appendTo writes chunks until ctx ends or something fails.
func (d *durWL) appendTo(ctx context.Context, df *durFile, fd *os.File, rng *rand.Rand) {
	for n := 1; pause(ctx, rng, 50); n++ {
		chunk := make([]byte, 100+rng.IntN(6000))
		for i := range chunk {
			chunk[i] = byte('a' + rng.IntN(26))
		}
		d.mu.Lock()
		df.Attempted = append(df.Attempted, chunk...)
		d.mu.Unlock()
		res, ok := d.w.call(df.node, func(string) (string, error) { _, err := fd.Write(chunk); return "", err })
		if !ok || res.err != nil || res.overlapped {
			d.fail(df, res)
			return
		}
		d.mu.Lock()
		df.Written = len(df.Attempted)
		d.mu.Unlock()
		if n%3 == 0 {
			res, ok := d.w.call(df.node, func(string) (string, error) {
				at := d.w.now()
				err := fd.Sync()
				if err == nil {
					d.w.noteSync(df.node, df.inc, at)
				}
				return "", err
			})
			if !ok || res.err != nil || res.overlapped {
				d.fail(df, res)
				return
			}
			d.mu.Lock()
			df.Synced = df.Written
			df.syncedAt = res.end
			d.mu.Unlock()
		}
	}
}

func (d *durWL) fail(df *durFile, res result) {
	d.mu.Lock()
	df.errored = true
	df.lastErr = fmt.Sprintf("at %.3fs: %v (overlapped a crash or remount: %v)", res.start.Seconds(), res.err, res.overlapped)
	if res.start == 0 {
		df.lastErr = "when its node went down"
	}
	d.mu.Unlock()
}

// check reads every file from another node than its writer.
func (d *durWL) check(w *world) []check.Anomaly {
	d.mu.Lock()
	files := slices.Clone(d.files)
	d.mu.Unlock()
	var out []check.Anomaly
	checked := 0
	for _, df := range files {
		reader := w.otherUp(df.node)
		if reader == nil {
			out = append(out, check.Anomaly{Kind: "final read failed", Key: df.Path, Detail: "no fs node up to read it"})
			continue
		}
		res, ok := w.call(reader, func(mnt string) (string, error) {
			b, err := os.ReadFile(filepath.Join(mnt, df.Path))
			return string(b), err
		})
		got := []byte(res.val)
		missing := errors.Is(res.err, fs.ErrNotExist)
		if !ok || (res.err != nil && !missing) {
			out = append(out, check.Anomaly{Kind: "final read failed", Key: df.Path, Detail: fmt.Sprintf("read on %s: %v", reader.name, res.err)})
			continue
		}
		d.mu.Lock()
		f := df.DurableFile
		f.Attempted = slices.Clone(df.Attempted)
		f.Crashed = df.errored || df.node.wasCrashed(df.inc)
		d.mu.Unlock()
		checked++
		if a := check.Durable(f, got, missing); a != nil {
			d.mu.Lock()
			a.Detail += fmt.Sprintf("; read on %s; writer incarnation %d; last fsync returned at %.3fs; writing stopped %s",
				reader.name, df.inc, df.syncedAt.Seconds(), df.lastErr)
			d.mu.Unlock()
			for _, name := range w.fsOrd {
				res, ok := w.call(w.fs[name], func(mnt string) (string, error) {
					st, err := os.Stat(filepath.Join(mnt, df.Path))
					if err != nil {
						return "", err
					}
					return fmt.Sprint(st.Size()), nil
				})
				a.Detail += fmt.Sprintf("; size seen on %s: %s (up %v, %v)", name, res.val, ok, res.err)
			}
			out = append(out, *a)
		}
	}
	w.mu.Lock()
	w.sum.Checked("fsync-durable files", checked)
	w.mu.Unlock()
	return out
}

// randomUp returns a random fs node that is up, or nil.
func (w *world) randomUp(rng *rand.Rand) *fsNode {
	var up []*fsNode
	for _, name := range w.fsOrd {
		if _, ok := w.fs[name].state(); ok {
			up = append(up, w.fs[name])
		}
	}
	if len(up) == 0 {
		time.Sleep(200 * time.Millisecond)
		return nil
	}
	return up[rng.IntN(len(up))]
}

// otherUp returns an fs node other than f that is up, else f if up.
func (w *world) otherUp(f *fsNode) *fsNode {
	for _, name := range w.fsOrd {
		if g := w.fs[name]; g != f {
			if _, ok := g.state(); ok {
				return g
			}
		}
	}
	if _, ok := f.state(); ok {
		return f
	}
	return nil
}
