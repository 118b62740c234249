package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one plumeria process of a run: its host, arguments and log
// survive restarts.
type proc struct {
	name    string // s1 (coordinator+brick), l1 (lock server), f1 (fs node)
	role    string // "server", "lock", "fs"
	host    *host
	bin     string
	args    []string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current incarnation exits
	waitErr error
	held    bool  // the nemesis keeps it down or paused: the doctor leaves it alone
	paused  bool  // SIGSTOPped
	starts  int   // incarnations started
	logFrom int64 // log size when the current incarnation started
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *proc) runningLocked() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// start runs a new incarnation, appending to the log.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("start %s: already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, _ := f.Stat()
	p.starts++
	fmt.Fprintf(f, "=== chaos: start #%d of %s at %s in %s: plumeria %s\n", p.starts, p.name,
		time.Now().Format("15:04:05.000"), p.host.name, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all") // SIGQUIT dumps every goroutine
	cmd.Stdout, cmd.Stderr = f, f
	if err := startIn(p.host.nsPath(), cmd); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.logFrom = st.Size()
	exited := make(chan struct{})
	p.cmd, p.exited, p.waitErr, p.paused = cmd, exited, nil, false
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// signal sends sig to the current incarnation (SIGSTOP and SIGCONT are
// remembered: the doctor leaves paused processes alone).
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("signal %v to %s: not running", sig, p.name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// stop sends sig and waits up to wait for the exit; SIGKILL after that.
func (p *proc) stop(sig syscall.Signal, wait time.Duration) error {
	p.mu.Lock()
	exited := p.exited
	paused := p.paused
	p.mu.Unlock()
	if exited == nil || !p.running() {
		return nil
	}
	if err := p.signal(sig); err != nil {
		return nil // exited meanwhile
	}
	if paused && sig != syscall.SIGKILL {
		p.signal(syscall.SIGCONT)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(wait):
	}
	p.signal(syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not die after SIGKILL", p.name, p.cmd.Process.Pid)
	}
	return fmt.Errorf("%s did not exit within %v of %v; killed", p.name, wait, sig)
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

func (p *proc) setHeld(v bool) {
	p.mu.Lock()
	p.held = v
	p.mu.Unlock()
}

func (p *proc) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// logSince returns what the current incarnation logged.
func (p *proc) logSince() string {
	p.mu.Lock()
	from := p.logFrom
	p.mu.Unlock()
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	return string(b[from:])
}

// tail returns the last n lines of the whole log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
