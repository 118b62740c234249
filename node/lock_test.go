package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/lock"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
)

// TestLockServiceWithRaftCoordinator runs the lock service against the
// real coordinator: two lock servers, three clerks with sessions opened
// through the coordinator. Writers on shared locks never overlap; when a
// lock server stops, its groups move and the workload goes on; when a
// clerk dies holding a lock, another clerk recovers its log exactly once
// and then gets the lock.
func TestLockServiceWithRaftCoordinator(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := context.Background()
	c, err := Start(ctx, Config{Name: "c1", Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, "c1"), Coordinator: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var servers []*Node
	for i := 1; i <= 2; i++ {
		n, err := Start(ctx, Config{Name: fmt.Sprintf("l%d", i), Listen: "127.0.0.1:0", DataDir: filepath.Join(dir, fmt.Sprintf("l%d", i)),
			Lock: true, Coord: []string{c.Addr()}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, n)
	}
	defer func() {
		for _, s := range servers {
			if s != nil {
				s.Stop()
			}
		}
	}()
	cc, err := coordclient.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	var holders sync.Map // lock id → clerk that believes it writes
	var violations atomic.Int64
	var recoveries sync.Map // dead clerk → count
	type member struct {
		c      *lockclerk.Clerk
		cancel context.CancelFunc
	}
	newClerk := func(id string) member {
		var session uint64
		err := cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
			r, err := cl.OpenSession(ctx, &pb.OpenSessionRequest{Clerk: id, Tables: []string{"vol"}})
			if err == nil {
				session = r.Session
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := lockclerk.New(lockclerk.Config{ID: id, Session: session, Groups: 128, Servers: NewLockResolver(cc), // ticks and leases: the lock servers' defaults
			OnRecover: func(table, dead string, s uint64) error {
				n, _ := recoveries.LoadOrStore(dead, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				return nil
			}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go cl.Run(cctx)
		if err := cl.Open("vol"); err != nil {
			t.Fatal(err)
		}
		return member{cl, cancel}
	}
	clerks := []member{newClerk("n1"), newClerk("n2"), newClerk("n3")}
	work := func(m member, id string, rounds int) error {
		for i := 0; i < rounds; i++ {
			l := uint64(i % 4)
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := m.c.Acquire(actx, "vol", l, lock.Write)
			cancel()
			if err != nil {
				return fmt.Errorf("%s acquire %d: %w", id, l, err)
			}
			// Acquire pins the lock: no revoke takes it until Unpin.
			if prev, loaded := holders.LoadOrStore(l, id); loaded {
				violations.Add(1)
				t.Errorf("lock %d: %s writes while %v does", l, id, prev)
			}
			time.Sleep(time.Millisecond)
			holders.Delete(l)
			m.c.Unpin("vol", l, lock.Write)
			if i%3 == 0 {
				m.c.Release("vol", l) // sometimes give it back; otherwise it stays sticky
			}
		}
		return nil
	}
	run := func(rounds int) {
		var wg sync.WaitGroup
		errs := make(chan error, len(clerks))
		for i, m := range clerks[:2] {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- work(m, fmt.Sprintf("n%d", i+1), rounds) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	run(40)
	t.Log("stopping lock server l1")
	servers[0].Stop()
	servers[0] = nil
	run(40)

	// n3 dies holding lock 9; n1 recovers its log, then gets lock 9.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := clerks[2].c.Acquire(actx, "vol", 9, lock.Write); err != nil {
		t.Fatal(err)
	}
	clerks[2].c.Unpin("vol", 9, lock.Write)
	clerks[2].cancel()
	if err := clerks[0].c.Acquire(actx, "vol", 9, lock.Write); err != nil {
		t.Fatalf("lock of a dead clerk never granted: %v", err)
	}
	n, ok := recoveries.Load("n3")
	if !ok || n.(*atomic.Int64).Load() != 1 {
		t.Fatalf("recovery of n3 ran %v times, want 1", n)
	}
	for _, m := range clerks {
		m.cancel()
	}
}
