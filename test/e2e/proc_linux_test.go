package e2e

import "syscall"

// procAttr makes a server die with the test process, so a crashed or
// interrupted `go test` leaves no servers behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
