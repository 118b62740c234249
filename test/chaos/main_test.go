// Package chaos is Plumeria's chaos harness: a real cluster of separate
// processes, each host in its own network namespace, with faults injected
// from a seed while workloads run on FUSE mounts, and checkers that hold
// the result to DESIGN.md §9.
//
// TestChaos: per run, a bridge and one network namespace per host (three
// server hosts, each with `plumeria server --coordinator --brick` on port
// 7001 and `plumeria server --lock` on port 7002, so the lock service can
// be cut off alone; three fs nodes, each `plumeria mount` in its own
// namespace; the mounts land in the shared mount namespace, so the test
// reads and writes them directly). The fault schedule comes from the seed
// (package plan); the workloads (register, set, fsync durability) record
// every operation with monotonic start and end times; after healing every
// fault the checkers (package check) run, every node unmounts and
// `plumeria fsck` must exit 0.
//
// TestCrashPoints: one fs node on loopback runs a metadata-heavy workload
// and is SIGKILLed at a random point, many times; the tree recovered must
// be the tree after a prefix of its operations that keeps everything
// before its last fsync, and fsck must be clean.
//
// Both skip under -short, when not root, without /dev/fuse, and TestChaos
// also when `ip netns` cannot make a namespace. Flags (after -args):
//
//	-chaos.seed N          replay seed N (one run)
//	-chaos.seeds N         runs with random seeds (default 3)
//	-chaos.duration D      workload time per run (default 40s; long mode 10m)
//	-chaos.faults LIST     fault kinds, comma-separated (default all)
//	-chaos.crash-iterations N  crash points (default 5; long mode 200)
//	-chaos.long            long mode defaults
//	-chaos.keep            keep every run's directory (logs, visualizations)
//
// `make chaos SEED=N DURATION=D` runs the long mode; see docs/testing.md.
package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/test/chaos/check"
)

var (
	flagSeed       = flag.Uint64("chaos.seed", 0, "replay this seed (one run); 0: random seeds")
	flagSeeds      = flag.Int("chaos.seeds", 0, "runs with random seeds (default 3; 1 in long mode)")
	flagDuration   = flag.Duration("chaos.duration", 0, "workload time per run (default 40s; 10m in long mode)")
	flagFaults     = flag.String("chaos.faults", "all", "fault kinds, comma-separated (see test/chaos/plan)")
	flagCrashIters = flag.Int("chaos.crash-iterations", 0, "crash points to explore (default 5; 200 in long mode)")
	flagLong       = flag.Bool("chaos.long", false, "long mode: longer runs, more crash points")
	flagKeep       = flag.Bool("chaos.keep", false, "keep every run's directory, not only those of failed runs")
	flagSummary    = flag.String("chaos.summary", "", "also write the summary table to this file (go test shows a passing package's output only with -v)")
	flagVersions   = flag.Bool("chaos.file-versions", false, "TestChaos on a volume that keeps file versions (crash points always do)")
	flagPolicy     = flag.String("chaos.policy", "ec=2+1", "TestChaos: availability policy of the root (files are coded into stripes while the faults run); \"\" for none")
)

// total sums every run of the package; TestMain prints its table.
var total struct {
	sync.Mutex
	check.Summary
}

func addSummary(s check.Summary) {
	total.Lock()
	defer total.Unlock()
	total.Add(s)
}

func TestMain(m *testing.M) {
	flag.Parse()
	syscall.Umask(0o022) // the crash-point model assumes it
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "chaos: %v: cleaning up\n", s)
		cleanupAll()
		os.Exit(2)
	}()
	code := m.Run()
	cleanupAll()
	total.Lock()
	if total.Runs > 0 {
		fmt.Printf("\n%s", total.Table())
		if *flagSummary != "" {
			if err := os.WriteFile(*flagSummary, []byte(total.Table()), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "chaos: write summary: %v\n", err)
			}
		}
	}
	total.Unlock()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}

// bin is the plumeria binary, built once by the first test that needs it.
var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func plumeriaBin(t *testing.T) string {
	t.Helper()
	bin.once.Do(func() {
		bin.dir, bin.err = os.MkdirTemp("", "plumeria-chaos-bin-")
		if bin.err != nil {
			return
		}
		bin.path = filepath.Join(bin.dir, "plumeria")
		out, err := exec.Command("go", "build", "-o", bin.path, "github.com/plumeria-fs/plumeria/cmd/plumeria").CombinedOutput()
		if err != nil {
			bin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		// Mutual TLS for every process of every run: one CA, in
		// PLUMERIA_CERTS of the processes the worlds start.
		certs := filepath.Join(bin.dir, "certs")
		if out, err := exec.Command(bin.path, "init", "--certs", certs, "--cluster", "chaos").CombinedOutput(); err != nil {
			bin.err = fmt.Errorf("plumeria init: %v\n%s", err, out)
			return
		}
		bin.err = os.Setenv("PLUMERIA_CERTS", certs)
	})
	if bin.err != nil {
		t.Fatal(bin.err)
	}
	return bin.path
}

// needRoot skips unless this process can mount FUSE file systems.
func needRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos harness: skipped under -short (it runs real clusters for minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("chaos harness: needs root (network namespaces, iptables, FUSE mounts)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("chaos harness: no /dev/fuse (make deps installs fuse3)")
	}
	for _, tool := range []string{"ip", "iptables", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("chaos harness: no %s (make deps installs iproute2 and iptables)", tool)
		}
	}
}

// long reports whether the long mode's defaults apply.
func long() bool { return *flagLong }

func runDuration() time.Duration {
	switch {
	case *flagDuration > 0:
		return *flagDuration
	case long():
		return 10 * time.Minute
	}
	return 40 * time.Second
}

// runDir makes the directory of one run; it is removed when the run
// passed, unless -chaos.keep.
func runDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "plumeria-chaos-"+strings.NewReplacer("/", "_", "=", "", " ", "").Replace(name)+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *flagKeep {
			t.Logf("run directory kept: %s", dir)
			return
		}
		unmountUnder(dir)
		os.RemoveAll(dir)
	})
	return dir
}
