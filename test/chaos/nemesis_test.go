package chaos

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/plumeria-fs/plumeria/test/chaos/plan"
)

// nemesis carries out a schedule of faults on a world.
type nemesis struct {
	w     *world
	netem bool

	mu      sync.Mutex
	rules   map[int][]rule // fault → firewall rules it added
	qdisc   map[int]*host  // fault → host whose root qdisc it set
	fillers map[int]string // fault → filler file
}

// rule is one iptables rule in a host's namespace: args after the chain
// operation, e.g. {"INPUT", "-i", "eth0", "-j", "DROP"}.
type rule struct {
	h    *host
	args []string
}

func newNemesis(w *world) *nemesis {
	n := &nemesis{w: w, rules: map[int][]rule{}, qdisc: map[int]*host{}, fillers: map[int]string{}}
	if w.net != nil {
		n.netem = netemAvailable(w.net.hosts[0])
		if !n.netem {
			w.note("the kernel has no sch_netem: the delay nemesis uses a tbf rate limit instead (packets queue, and drop past 500 ms), and loss uses iptables' statistic match")
		}
	}
	return n
}

// run carries out faults (times relative to t0) and returns once every
// one is healed, or when ctx ends (then healAll is the caller's).
func (n *nemesis) run(ctx context.Context, t0 time.Duration, faults []plan.Fault) {
	var heals sync.WaitGroup
	for i, f := range faults {
		if !sleepUntil(ctx, n.w, t0+f.At) {
			break
		}
		if late := n.w.now() - (t0 + f.At); late > 2*time.Second {
			n.w.logf("the schedule runs %v late (an earlier fault took long to inject)", late.Round(time.Second))
		}
		heal := n.apply(i, f)
		if heal == nil {
			continue
		}
		heals.Add(1)
		go func() {
			defer heals.Done()
			sleepUntil(ctx, n.w, t0+f.End())
			n.w.logf("heal %s", f)
			heal()
		}()
	}
	heals.Wait()
}

func sleepUntil(ctx context.Context, w *world, at time.Duration) bool {
	d := at - w.now()
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// apply injects f and returns how to heal it (nil: nothing to heal, or
// skipped).
func (n *nemesis) apply(id int, f plan.Fault) func() {
	w := n.w
	skip := func(why string) func() {
		w.logf("skip %s: %s", f, why)
		return nil
	}
	switch f.Kind {
	case plan.KillServer, plan.KillLock:
		p := n.serverProc(f)
		if !p.running() {
			return skip("not running")
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		p.setHeld(true)
		p.stop(syscall.SIGKILL, time.Second)
		return func() {
			if err := p.start(); err != nil {
				w.logf("restart %s: %v", p.name, err)
			}
			p.setHeld(false)
		}
	case plan.PauseServer, plan.PauseLock:
		p := n.serverProc(f)
		if !p.running() {
			return skip("not running")
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		p.setHeld(true)
		p.signal(syscall.SIGSTOP)
		return func() {
			p.signal(syscall.SIGCONT)
			p.setHeld(false)
		}
	case plan.KillFS:
		fs := w.fs[f.Target]
		if _, up := fs.state(); !up || fs.isRemounting() {
			return skip("down or remounting")
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		fs.kill()
		return func() { fs.remountAsync("after kill", nil) }
	case plan.PauseFS:
		fs := w.fs[f.Target]
		if _, up := fs.state(); !up || fs.isRemounting() {
			return skip("down or remounting")
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		fs.p.signal(syscall.SIGSTOP)
		inc := fs.incarnation()
		return func() {
			// Paused past its lease: what it did not sync may be lost.
			fs.mu.Lock()
			fs.crashed[inc] = true
			fs.mu.Unlock()
			fs.p.signal(syscall.SIGCONT)
		}
	case plan.Isolate, plan.Split, plan.CutLocks, plan.CutBricks, plan.Loss:
		rules := n.firewall(f)
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		for _, r := range rules {
			if _, err := r.h.exec("iptables", append([]string{"-w", "-I"}, r.args...)...); err != nil {
				w.logf("iptables on %s: %v", r.h.name, err)
			}
		}
		n.mu.Lock()
		n.rules[id] = rules
		n.mu.Unlock()
		return func() { n.unfirewall(id) }
	case plan.Delay:
		h := w.hosts[f.Target]
		args := []string{"qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "2mbit", "burst", "32kb", "latency", "500ms"}
		if n.netem {
			args = []string{"qdisc", "add", "dev", "eth0", "root", "netem", "delay", "100ms", "50ms", "loss", "1%"}
		}
		if _, err := h.exec("tc", args...); err != nil {
			return skip(err.Error())
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		n.mu.Lock()
		n.qdisc[id] = h
		n.mu.Unlock()
		return func() { n.untc(id) }
	case plan.DiskFull:
		path, err := fill(filepath.Join(w.dir, f.Target, "brick"))
		if err != nil {
			return skip(err.Error())
		}
		w.logf("fault %s", f)
		w.fault(string(f.Kind))
		n.mu.Lock()
		n.fillers[id] = path
		n.mu.Unlock()
		return func() { n.unfill(id) }
	case plan.Corrupt:
		rng := rand.New(rand.NewPCG(w.seed, uint64(id)))
		hit, err := corruptBlocks(filepath.Join(w.dir, f.Target, "brick", "store"), f.Param, rng)
		if err != nil || hit == 0 {
			return skip(fmt.Sprintf("nothing corrupted (%v)", err))
		}
		w.logf("fault %s: %d blocks hit", f, hit)
		w.fault(string(f.Kind))
		return nil
	}
	return skip("unknown kind")
}

// serverProc is the process a server-side kill or pause hits.
func (n *nemesis) serverProc(f plan.Fault) *proc {
	if f.Kind == plan.KillLock || f.Kind == plan.PauseLock {
		if p := n.w.procs["l"+f.Target[1:]]; p != nil {
			return p
		}
	}
	return n.w.procs[f.Target]
}

// firewall returns the rules that make f.
func (n *nemesis) firewall(f plan.Fault) []rule {
	w := n.w
	both := func(h *host, match ...string) []rule {
		return []rule{
			{h, append(append([]string{"INPUT"}, match...), "-j", "DROP")},
			{h, append(append([]string{"OUTPUT"}, match...), "-j", "DROP")},
		}
	}
	h := w.hosts[f.Target]
	switch f.Kind {
	case plan.Isolate:
		return []rule{{h, []string{"INPUT", "-i", "eth0", "-j", "DROP"}}, {h, []string{"OUTPUT", "-o", "eth0", "-j", "DROP"}}}
	case plan.Split:
		var out []rule
		for _, m := range f.Minority {
			for _, o := range w.net.hosts {
				if !slices.Contains(f.Minority, o.name) {
					out = append(out, rule{w.hosts[m], []string{"INPUT", "-s", o.ip, "-j", "DROP"}},
						rule{w.hosts[m], []string{"OUTPUT", "-d", o.ip, "-j", "DROP"}})
				}
			}
		}
		return out
	case plan.CutLocks, plan.CutBricks:
		port := strconv.Itoa(lockPort)
		if f.Kind == plan.CutBricks {
			port = strconv.Itoa(serverPort)
		}
		return []rule{{h, []string{"OUTPUT", "-p", "tcp", "--dport", port, "-j", "DROP"}}, {h, []string{"INPUT", "-p", "tcp", "--sport", port, "-j", "DROP"}}}
	case plan.Loss:
		return both(h, "-m", "statistic", "--mode", "random", "--probability", fmt.Sprintf("%.2f", float64(f.Param)/100))
	}
	return nil
}

func (n *nemesis) unfirewall(id int) {
	n.mu.Lock()
	rules := n.rules[id]
	delete(n.rules, id)
	n.mu.Unlock()
	for _, r := range rules {
		if _, err := r.h.exec("iptables", append([]string{"-w", "-D"}, r.args...)...); err != nil {
			n.w.logf("iptables -D on %s: %v", r.h.name, err)
		}
	}
}

func (n *nemesis) untc(id int) {
	n.mu.Lock()
	h := n.qdisc[id]
	delete(n.qdisc, id)
	n.mu.Unlock()
	if h != nil {
		if _, err := h.exec("tc", "qdisc", "del", "dev", "eth0", "root"); err != nil {
			n.w.logf("tc on %s: %v", h.name, err)
		}
	}
}

func (n *nemesis) unfill(id int) {
	n.mu.Lock()
	path := n.fillers[id]
	delete(n.fillers, id)
	n.mu.Unlock()
	if path != "" {
		os.Remove(path)
	}
}

// healAll undoes whatever is still in force: firewall rules, qdiscs,
// fillers, paused and held processes. Down processes are left to the
// caller (restart) and the doctor.
func (n *nemesis) healAll() {
	n.mu.Lock()
	var ids, qs, fs []int
	for id := range n.rules {
		ids = append(ids, id)
	}
	for id := range n.qdisc {
		qs = append(qs, id)
	}
	for id := range n.fillers {
		fs = append(fs, id)
	}
	n.mu.Unlock()
	for _, id := range ids {
		n.unfirewall(id)
	}
	for _, id := range qs {
		n.untc(id)
	}
	for _, id := range fs {
		n.unfill(id)
	}
	for _, name := range n.w.order {
		p := n.w.procs[name]
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if paused {
			p.signal(syscall.SIGCONT)
		}
		p.setHeld(false)
	}
}

// fill takes every free byte of the file system holding dir and returns
// the filler's path: big writes until ENOSPC, then small ones.
func fill(dir string) (string, error) {
	path := filepath.Join(dir, "chaos-filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, n := range []int{1 << 20, 4096, 512} {
		buf := make([]byte, n)
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
	}
	return path, nil
}

// Put records in a brick's segment files (brick/store/record.go): header
// of 52 bytes (magic "PLSR" little-endian, version 1, kind 1 = put,
// dlen = 4096 at offset 40), then the block. corruptBlocks flips 16 bytes
// in the data of n random put records, so only the data crc catches it.
func corruptBlocks(storeDir string, n int, rng *rand.Rand) (int, error) {
	const headerBytes, blockBytes, magic = 52, 4096, 0x52534c50
	files, err := filepath.Glob(filepath.Join(storeDir, "seg-*.log"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no segment files in %s", storeDir)
	}
	slices.Sort(files)
	type loc struct {
		file string
		off  int64
	}
	var puts []loc
	pat := binary.LittleEndian.AppendUint32(nil, magic)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for from := 0; ; {
			i := bytes.Index(b[from:], pat)
			if i < 0 {
				break
			}
			at := from + i
			from = at + 1
			if at+headerBytes+blockBytes > len(b) || b[at+4] != 1 || b[at+5] != 1 ||
				binary.LittleEndian.Uint32(b[at+40:]) != blockBytes {
				continue
			}
			puts = append(puts, loc{file, int64(at)})
		}
	}
	hit := 0
	for range n {
		if len(puts) == 0 {
			break
		}
		i := rng.IntN(len(puts))
		l := puts[i]
		puts = slices.Delete(puts, i, i+1)
		f, err := os.OpenFile(l.file, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		off := l.off + headerBytes + int64(rng.IntN(blockBytes-16))
		buf := make([]byte, 16)
		if _, err := f.ReadAt(buf, off); err == nil {
			for j := range buf {
				buf[j] ^= 0xff
			}
			if _, err := f.WriteAt(buf, off); err == nil {
				hit++
			}
		}
		f.Close()
	}
	return hit, nil
}
