package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plumeria-fs/plumeria/coord"
	"github.com/plumeria-fs/plumeria/test/chaos/check"
	"github.com/plumeria-fs/plumeria/test/chaos/plan"
)

const (
	lease        = 15 * time.Second // lock/clerk.LeaseTicksDefault × TickDefault
	registerKeys = 4
)

// seeds returns the seeds to run: the one given, or fresh random ones.
func seeds() []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	n := *flagSeeds
	if n <= 0 {
		n = 3
		if long() {
			n = 1
		}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = rand.Uint64()%1_000_000_000 + 1
	}
	return out
}

// TestChaos runs the cluster in network namespaces under the seed's
// fault schedule and checks the workloads' histories. See the package doc.
func TestChaos(t *testing.T) {
	needRoot(t)
	if why := netnsUsable(); why != "" {
		t.Skip("chaos harness: " + why)
	}
	kinds, err := plan.ParseKinds(*flagFaults)
	if err != nil {
		t.Fatal(err)
	}
	var sum check.Summary
	for i, seed := range seeds() {
		if d, ok := t.Deadline(); ok && i > 0 && time.Until(d) < runDuration()+6*time.Minute {
			t.Logf("seed %d and later skipped: too close to the test deadline (go test -timeout)", seed)
			break
		}
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := runChaos(t, seed, kinds)
			sum.Add(s)
			if t.Failed() {
				t.Logf("replay: make chaos SEED=%d DURATION=%v FAULTS=%s", seed, runDuration(), *flagFaults)
			}
		})
	}
	t.Logf("\n%s", sum.Table())
	addSummary(sum)
}

func runChaos(t *testing.T, seed uint64, kinds []plan.Kind) check.Summary {
	dur := runDuration()
	o := clusterOpts{netns: true, servers: 3, coordinators: 3, fsNodes: 3, replicas: 3, lockAlone: true, fileVersions: *flagVersions, policy: *flagPolicy}
	if slices.Contains(kinds, plan.DiskFull) {
		o.brickMiB = 1024
	}
	w := newWorld(t, fmt.Sprintf("chaos seed=%d", seed), seed, o)
	top := plan.Topology{Servers: []string{"s1", "s2", "s3"}, FS: []string{"f1", "f2", "f3"}}
	faults := plan.Make(plan.Options{Seed: seed, Duration: dur, Kinds: kinds, Lease: lease,
		GapMin: 3 * time.Second, GapMax: 12 * time.Second}, top)
	var sched []string
	for _, f := range faults {
		sched = append(sched, f.String())
	}
	w.logf("seed %d: %v of workload, %d faults scheduled:\n  %s", seed, dur, len(faults), strings.Join(sched, "\n  "))
	w.startCluster()
	w.logf("cluster up: subnet %s.0/24, namespaces %s-*", w.net.subnet, w.net.prefix)

	doctorCtx, stopDoctor := context.WithCancel(context.Background())
	doctorDone := make(chan struct{})
	go func() { defer close(doctorDone); w.doctor(doctorCtx) }()
	defer func() { stopDoctor(); <-doctorDone }()

	reg, set, dur2 := &registerWL{w: w}, &setWL{w: w}, &durWL{w: w}
	f1 := w.fs["f1"]
	for _, err := range []error{reg.setup(f1, registerKeys), set.setup(f1), dur2.setup(f1)} {
		if err != nil {
			w.fatal(err)
		}
	}
	work, stopWork := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	rngOf := func(stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }
	for i, name := range w.fsOrd {
		f := w.fs[name]
		for j := range 2 {
			client := 2*i + j
			workers.Add(1)
			go func() { defer workers.Done(); reg.worker(work, client, f, rngOf(uint64(100+client))) }()
		}
		workers.Add(1)
		go func() { defer workers.Done(); dur2.worker(work, f, rngOf(uint64(300+i))) }()
	}
	for c := range 2 {
		workers.Add(1)
		go func() { defer workers.Done(); set.worker(work, c, rngOf(uint64(200+c))) }()
	}

	nem := newNemesis(w)
	t0 := w.now()
	nemCtx, stopNem := context.WithTimeout(context.Background(), dur+time.Minute)
	nem.run(nemCtx, t0, faults)
	stopNem()
	if rest := t0 + dur - w.now(); rest > 0 {
		time.Sleep(rest)
	}
	w.logf("schedule done: healing everything")
	nem.healAll()
	healed := w.heal() && w.liveness()
	stopWork()
	workers.Wait()
	w.logf("workloads stopped")

	var found []check.Anomaly
	w.histories = map[string][]check.Op{"register": reg.rec.all(), "set": set.rec.all()}
	if healed {
		found = append(found, reg.check(w)...)
		found = append(found, set.check(w)...)
		found = append(found, dur2.check(w)...)
	} else {
		w.note(fmt.Sprintf("seed %d: the cluster did not recover after healing, so the final checks were skipped", seed))
		w.logf("the cluster did not recover: final checks skipped")
	}
	stopDoctor()
	<-doctorDone
	if !healed {
		w.dumpStacks()
	}
	w.finish()
	return w.report(found)
}

// heal restarts whatever is down and waits until the cluster is whole:
// every coordinator a voter with a leader, every brick and lock server
// up, every fs node mounted. It reports whether it became whole; if not,
// the status is saved in the run directory.
func (w *world) heal() (whole bool) {
	whole = true
	defer func() {
		if !whole {
			w.saveStatus("status-after-heal.json")
		}
	}()
	for _, name := range w.order {
		p := w.procs[name]
		if p.role != "fs" && !p.running() {
			w.logf("heal: restart %s", name)
			if err := p.start(); err != nil {
				w.logf("restart %s: %v", name, err)
			}
		}
	}
	var wg sync.WaitGroup
	for _, name := range w.fsOrd {
		f := w.fs[name]
		if _, up := f.state(); !up || !f.p.running() {
			wg.Add(1)
			f.remountAsync("heal", wg.Done)
		}
	}
	err := w.waitStatus(healWait(), "cluster whole again", func(st *coord.Status) (bool, string) {
		bricks, bs := brickSummary(st)
		locks, ls := lockSummary(st)
		return st.Leader != "" && bricks == w.opts.servers && locks == w.opts.servers,
			fmt.Sprintf("leader %q; bricks %s; lock servers %s", st.Leader, bs, ls)
	})
	if err != nil {
		whole = false
		w.anomaly(check.Anomaly{Kind: "no recovery after heal", Key: "cluster", Detail: err.Error()})
	}
	deadline := time.Now().Add(healWait())
	for _, name := range w.fsOrd {
		f := w.fs[name]
		for {
			_, up := f.state()
			if up && !f.isRemounting() {
				break
			}
			if time.Now().After(deadline) {
				whole = false
				w.anomaly(check.Anomaly{Kind: "no recovery after heal", Key: name,
					Detail: fmt.Sprintf("fs node %s not mounted %v after healing:\n%s", name, healWait(), lastLines(f.p.logSince(), 15))})
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !whole {
		w.closing.Store(true) // stop the remount loops
	}
	wg.Wait()
	w.closing.Store(false)
	return whole
}

// saveStatus writes `plumeria status --json` and the brick logs' warnings
// about faulty PGs into the run directory, for diagnosis.
func (w *world) saveStatus(name string) {
	out, err := w.cli(30*time.Second, "status", "--json", w.coordArg())
	if err != nil {
		out = err.Error()
	}
	path := filepath.Join(w.dir, name)
	os.WriteFile(path, []byte(out), 0o644)
	brief := ""
	var st coord.Status
	if json.Unmarshal([]byte(out), &st) == nil {
		_, bs := brickSummary(&st)
		_, ls := lockSummary(&st)
		var sess []string
		for _, s := range st.Sessions {
			sess = append(sess, fmt.Sprintf("%s/%d", s.Clerk, s.Session))
		}
		brief = fmt.Sprintf(": leader %q; bricks %s; lock servers %s; sessions not recovered %v", st.Leader, bs, ls, sess)
	}
	w.logf("status saved in %s%s", path, brief)
}

// livenessWait bounds how long liveness waits for a node that stops
// itself after the heal (a lease that ran out during the faults) to be
// mounted again: the lease, the recovery of its old session, a mount.
func livenessWait() time.Duration { return mountWait() + 30*time.Second }

// awaitIncarnation waits until f is up in incarnation inc or later, and
// reports whether it is before deadline.
func (w *world) awaitIncarnation(f *fsNode, inc int, deadline time.Time) bool {
	for time.Now().Before(deadline) && !w.closing.Load() {
		if _, up := f.state(); up && f.incarnation() >= inc {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// callNextIncarnation calls fn on f as w.call does; when the call fails
// and f is remounted before deadline, it calls again on the new
// incarnation. A node whose lock lease ran out during the faults finds
// out (and stops itself) only after the heal: its calls fail until it is
// remounted (fsNode.mount). Progress is then its next incarnation's; the
// same incarnation failing is the anomaly. Writers and readers alike: a
// node down for its remount when another node's write is checked is
// judged once it is back.
func (w *world) callNextIncarnation(f *fsNode, deadline time.Time, what string, fn func(mnt string) (string, error)) (result, bool) {
	for {
		inc := f.incarnation()
		res, up := w.call(f, fn)
		if (up && res.err == nil) || !w.awaitIncarnation(f, inc+1, deadline) {
			return res, up
		}
		w.logf("%s: %s again on incarnation %d (incarnation %d failed: up %v, %v)", f.name, what, f.incarnation(), inc, up, res.err)
	}
}

// liveness: after healing, every fs node must write a file that every
// other node then reads back. It reports whether all did.
func (w *world) liveness() (ok bool) {
	n := w.foundCount()
	defer func() {
		ok = w.foundCount() == n
		if !ok {
			w.saveStatus("status-no-progress.json")
		}
	}()
	deadline := time.Now().Add(livenessWait())
	for _, name := range w.fsOrd {
		f := w.fs[name]
		v := fmt.Sprintf("alive %s %d", name, w.seed)
		res, up := w.callNextIncarnation(f, deadline, "liveness write", func(mnt string) (string, error) {
			os.MkdirAll(filepath.Join(mnt, "live"), 0o755)
			p := filepath.Join(mnt, "live", name)
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				return "", err
			}
			fd, err := os.Open(p)
			if err != nil {
				return "", err
			}
			defer fd.Close()
			return "", fd.Sync()
		})
		if !up || res.err != nil {
			w.anomaly(check.Anomaly{Kind: "no progress after heal", Key: name,
				Detail: fmt.Sprintf("write on %s after healing: up %v, %v\n%s", name, up, res.err, lastLines(f.p.logSince(), 15))})
			continue
		}
		for _, other := range w.fsOrd {
			o := w.fs[other]
			res, up := w.callNextIncarnation(o, deadline, "liveness read of live/"+name, func(mnt string) (string, error) {
				b, err := os.ReadFile(filepath.Join(mnt, "live", name))
				return string(b), err
			})
			if !up || res.err != nil || res.val != v {
				w.anomaly(check.Anomaly{Kind: "no progress after heal", Key: other,
					Detail: fmt.Sprintf("read of live/%s on %s after healing: up %v, %q, %v\n%s", name, other, up, res.val, res.err, lastLines(o.p.logSince(), 15))})
			}
		}
	}
	return true // set by the deferred check
}

// opsOnNotedFiles returns the set operations on the elements named in
// text (inode notes say "set element NAME"), sorted by start.
func (w *world) opsOnNotedFiles(text string) []check.Op {
	names := map[string]bool{}
	for _, part := range strings.Split(text, "set element ")[1:] {
		name, _, _ := strings.Cut(part, " ")
		names[strings.TrimSuffix(name, ".r")] = true
	}
	var out []check.Op
	for _, op := range w.histories["set"] {
		if names[op.Key] {
			out = append(out, op)
		}
	}
	slices.SortFunc(out, func(a, b check.Op) int { return int(a.Start - b.Start) })
	return out
}

// dumpStacks makes every fs node and lock server print its goroutines
// (SIGQUIT) into its log, for diagnosing a cluster that made no progress.
func (w *world) dumpStacks() {
	for _, name := range w.order {
		p := w.procs[name]
		if p.role == "server" || !p.running() {
			continue
		}
		if f := w.fs[name]; f != nil {
			f.setDown(true)
		}
		p.signal(syscall.SIGCONT)
		p.mu.Lock()
		exited := p.exited
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGQUIT)
		}
		p.mu.Unlock()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			p.stop(syscall.SIGKILL, time.Second)
		}
		w.logf("%s: goroutines dumped into %s", name, p.logPath)
	}
}

// finish unmounts every node cleanly, checks that the in-sync replicas of
// every PG agree, runs fsck and scans the logs.
func (w *world) finish() {
	w.checkPolicy()
	var killed []string
	for _, name := range w.fsOrd {
		if _, up := w.fs[name].state(); !up {
			w.fs[name].p.stop(syscall.SIGKILL, time.Second)
			killed = append(killed, name)
			continue // reported already
		}
		if err := w.fs[name].unmount(); err != nil {
			w.anomaly(check.Anomaly{Kind: "unmount failed", Key: name, Detail: err.Error()})
		}
	}
	if err := w.verifyReplicas(); err != nil {
		w.anomaly(check.Anomaly{Kind: "replicas differ", Key: volumeName, Detail: err.Error()})
	}
	if len(killed) > 0 {
		// Their logs hold changes no one replayed: fsck would report
		// those as damage. The run has its anomaly already.
		w.note(fmt.Sprintf("%s: fsck skipped: fs nodes %v were down at the end and killed, their logs not replayed", w.name, killed))
	} else if err := w.fsck(); err != nil {
		a := fsckAnomaly(err)
		if notes := w.inodeNotes(a.Detail); notes != "" {
			a.Detail += "\n" + notes
		}
		a.History = w.opsOnNotedFiles(a.Detail)
		w.anomaly(a)
	}
	w.scanLogs()
}

// checkPolicy, when the run set an availability policy, logs how much of
// the file system's data the movers put in stripes, and reports an anomaly
// if none: the run would then not have tested coding under faults.
func (w *world) checkPolicy() {
	if w.opts.policy == "" {
		return
	}
	for _, name := range w.fsOrd {
		f := w.fs[name]
		if _, up := f.state(); !up {
			continue
		}
		buf := make([]byte, 64<<10)
		n, err := unix.Getxattr(f.mnt, "user.plumeria.layout", buf)
		if err != nil {
			w.logf("layout of the root on %s: %v", name, err)
			return
		}
		var l struct {
			TotalBytes int64            `json:"total_bytes"`
			Layouts    map[string]int64 `json:"layouts"`
		}
		if err := json.Unmarshal(buf[:n], &l); err != nil {
			w.logf("layout of the root on %s: %v", name, err)
			return
		}
		w.logf("policy %s: layout of the file system's data at the end: %v of %d bytes", w.opts.policy, l.Layouts, l.TotalBytes)
		coded := int64(0)
		for k, v := range l.Layouts {
			if k != "home" {
				coded += v
			}
		}
		if coded == 0 && l.TotalBytes > 1<<20 {
			w.anomaly(check.Anomaly{Kind: "policy without effect", Key: w.opts.policy,
				Detail: fmt.Sprintf("no byte of %d in stripes after the run: %v", l.TotalBytes, l.Layouts)})
		}
		return
	}
}

// fsckAnomaly names what fsck found: orphans alone (inodes with no links
// left allocated, as a crashed node leaves the files it kept open after
// their unlink) are told apart from damage.
func fsckAnomaly(err error) check.Anomaly {
	msg := err.Error()
	problems, orphans := 0, 0
	out, _, _ := strings.Cut(msg, "\nstderr:")
	if _, o, ok := strings.Cut(out, "stdout: "); ok {
		for _, line := range strings.Split(o, "\n") {
			if line = strings.TrimSpace(line); line == "" {
				continue
			}
			problems++
			if strings.Contains(line, " 0 links") && strings.HasSuffix(line, "an orphan") {
				orphans++
			}
		}
	}
	kind := "fsck"
	if problems > 0 && problems == orphans {
		kind = "fsck: orphans left after a crash"
	}
	return check.Anomaly{Kind: kind, Key: volumeName, Detail: msg}
}

// report fails the test for every anomaly that is not a known gap and
// returns the run's summary.
func (w *world) report(found []check.Anomaly) check.Summary {
	w.mu.Lock()
	found = append(found, w.found...)
	sum := w.sum
	w.mu.Unlock()
	for _, a := range found {
		sum.Anomalies = append(sum.Anomalies, check.RunAnomaly{Run: w.name, Seed: w.seed, Anomaly: a})
		if a.Known {
			w.t.Logf("seed %d: %s", w.seed, a)
		} else {
			w.t.Errorf("seed %d: %s", w.seed, a)
		}
	}
	if w.t.Failed() {
		w.dumpLogs()
		for name, ops := range w.histories {
			var b strings.Builder
			for _, op := range ops {
				fmt.Fprintln(&b, op)
			}
			path := filepath.Join(w.dir, "history-"+name+".txt")
			os.WriteFile(path, []byte(b.String()), 0o644)
			w.t.Logf("%s history (%d operations): %s", name, len(ops), path)
		}
	}
	w.t.Logf("\n%s", sum.Table())
	return sum
}
