package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Children are forked from one goroutine locked to a thread that never
// exits: Pdeathsig fires when the thread that forked a child exits, not
// when the process does (test/e2e/spawn_test.go has the story). The same
// thread enters a host's network namespace (setns) just for the fork, so
// the child lives in that namespace while sharing the test's mount
// namespace, where its FUSE mount then shows. `ip netns exec` would not
// do: it also unshares the mount namespace, hiding the mount.
var spawnReq = make(chan func())

// selfNet is this process's own network namespace, to return to.
var selfNet struct {
	once sync.Once
	f    *os.File
	err  error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for f := range spawnReq {
			f()
		}
	}()
}

// startIn starts cmd in the network namespace at nsPath ("" for ours),
// with Pdeathsig set so it dies with the test.
func startIn(nsPath string, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &unix.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = unix.SIGKILL
	done := make(chan error, 1)
	spawnReq <- func() { done <- startLocked(nsPath, cmd) }
	return <-done
}

// startLocked runs on the spawner thread. Go creates new threads from a
// template thread when the current one is locked, so no other thread
// inherits the namespace meanwhile.
func startLocked(nsPath string, cmd *exec.Cmd) error {
	if nsPath == "" {
		return cmd.Start()
	}
	selfNet.once.Do(func() {
		selfNet.f, selfNet.err = os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	})
	if selfNet.err != nil {
		return fmt.Errorf("open own network namespace: %w", selfNet.err)
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %s: %w", nsPath, err)
	}
	startErr := cmd.Start()
	if err := unix.Setns(int(selfNet.f.Fd()), unix.CLONE_NEWNET); err != nil {
		// The spawner thread would fork every later child in the wrong place.
		panic(fmt.Sprintf("chaos: cannot return the spawner thread to its network namespace: %v", err))
	}
	return startErr
}
