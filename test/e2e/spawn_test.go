package e2e

import (
	"os/exec"
	"runtime"
)

// Pdeathsig (procAttr) fires when the OS thread that forked a child exits,
// not when the test process does. Go may fork from any thread, and a test
// that locks a goroutine to a thread and lets it exit (posixtest's
// permissions case does, to drop per-thread credentials) would SIGKILL
// every child forked from that thread. So children are forked from one
// goroutine locked to a thread that never exits.
var spawnReq = make(chan func())

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for f := range spawnReq {
			f()
		}
	}()
}

// startCmd starts cmd from the spawner thread.
func startCmd(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawnReq <- func() { done <- cmd.Start() }
	return <-done
}
