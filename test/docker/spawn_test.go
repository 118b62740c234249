//go:build linux

package docker

import (
	"os/exec"
	"runtime"
	"syscall"
)

// The mount process dies with the test (Pdeathsig), so an interrupted
// `go test` leaves no FUSE server behind. Pdeathsig fires when the forking
// OS thread exits, so children are forked from one goroutine locked to a
// thread that never exits (as in test/e2e/spawn_test.go).
var spawnReq = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked
		for f := range spawnReq {
			f()
		}
	}()
}

// startChild starts cmd from the spawner thread, killed if the test dies.
func startChild(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	spawnReq <- func() { done <- cmd.Start() }
	return <-done
}
