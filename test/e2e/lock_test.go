package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coord"
)

// use is one recorded use of a write lock by a clerk process.
type use struct {
	clerk      string
	lock       uint64
	start, end int64
}

// readLockRecords parses the records `plumeria lock workload` wrote.
func readLockRecords(t *testing.T, files []string) (uses []use, recovered map[string]int) {
	t.Helper()
	recovered = map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue // the clerk has not started yet
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			switch {
			case len(fs) == 5 && fs[0] == "use":
				l, _ := strconv.ParseUint(fs[2], 10, 64)
				s, _ := strconv.ParseInt(fs[3], 10, 64)
				e, _ := strconv.ParseInt(fs[4], 10, 64)
				uses = append(uses, use{fs[1], l, s, e})
			case len(fs) == 3 && fs[0] == "recovered":
				recovered[fs[1]]++
			}
		}
	}
	return uses, recovered
}

// TestLockServiceProcesses: a coordinator, three lock servers and four
// clerks, each its own process. Mid-workload a lock server and then a
// clerk are SIGKILLed. No two clerks ever use one write lock at once, the
// workload goes on, and the dead clerk's log is recovered exactly once.
func TestLockServiceProcesses(t *testing.T) {
	c := newCluster(t)
	c.addCoordinator("c1")
	c.waitStatus(30*time.Second, "c1 leads", func(st *coord.Status) (bool, string) {
		return st.Leader == "c1", fmt.Sprintf("leader %q", st.Leader)
	})
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("l%d", i)
		p := c.newProc(name)
		p.args = []string{"server", "--name", name, "--listen", p.addr, "--data", p.data, "--lock", "--coord", strings.Join(c.coordAddrs(), ",")}
		c.start(p)
	}
	c.waitStatus(30*time.Second, "3 lock servers own all groups", func(st *coord.Status) (bool, string) {
		total, up := 0, 0
		for _, l := range st.LockServers {
			total += l.Groups
			if l.State == "up" && l.Groups > 0 {
				up++
			}
		}
		return total == 128 && up == 3, fmt.Sprintf("%+v", st.LockServers)
	})
	var files []string
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("n%d", i)
		p := c.newProc(name)
		out := filepath.Join(c.dir, name+".uses")
		files = append(files, out)
		p.args = []string{"lock", "workload", "--coord", strings.Join(c.coordAddrs(), ","), "--id", name, "--out", out, "--locks", "6"}
		c.start(p)
	}
	progress := func(what string) {
		before, _ := readLockRecords(t, files)
		c.waitFor(60*time.Second, what, func() (bool, string) {
			now, _ := readLockRecords(t, files)
			return len(now) >= len(before)+200, fmt.Sprintf("%d uses, %d before", len(now), len(before))
		})
	}
	progress("workload running")
	c.kill("l2")
	progress("workload going on after a lock server died")
	killed := time.Now().UnixNano()
	c.kill("n4")
	c.waitFor(90*time.Second, "n4's log recovered", func() (bool, string) {
		_, rec := readLockRecords(t, files)
		return rec["n4"] > 0, fmt.Sprintf("recoveries %v", rec)
	})
	progress("workload going on after a clerk died")
	for _, n := range []string{"n1", "n2", "n3"} {
		c.stop(n)
	}
	uses, rec := readLockRecords(t, files)
	if rec["n4"] != 1 {
		t.Fatalf("n4's log recovered %d times, want exactly once", rec["n4"])
	}
	byLock := map[uint64][]use{}
	for _, u := range uses {
		byLock[u.lock] = append(byLock[u.lock], u)
	}
	for l, us := range byLock {
		sort.Slice(us, func(i, j int) bool { return us[i].start < us[j].start })
		for i := 1; i < len(us); i++ {
			if us[i].start < us[i-1].end {
				t.Fatalf("lock %d: %s used it from %d while %s held it until %d", l, us[i].clerk, us[i].start, us[i-1].clerk, us[i-1].end)
			}
		}
	}
	// Every lock, including those n4 held when it died, was granted again.
	for l := uint64(0); l < 6; l++ {
		after := false
		for _, u := range byLock[l] {
			after = after || u.start > killed && u.clerk != "n4"
		}
		if !after {
			t.Fatalf("lock %d never used again after n4 died", l)
		}
	}
	c.logf("%d uses of %d locks checked, n4 recovered once", len(uses), len(byLock))
}
