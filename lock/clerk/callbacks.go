package clerk

import (
	"context"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/lock"
)

// job is one owner callback to run: exactly one field is set.
type job struct {
	flush     *lock.Flush
	recovery  *lock.RunRecovery
	leaseLost bool
}

func (c *Clerk) queueLocked(j job) {
	c.mu.jobs = append(c.mu.jobs, j)
	select {
	case c.jobsIn <- struct{}{}:
	default:
	}
}

// callbacks starts queued callbacks in order, at most CallbacksMax at
// once, until ctx ends; it returns after the running ones have returned.
func (c *Clerk) callbacks(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, c.cfg.CallbacksMax)
	for {
		c.mu.Lock()
		jobs := c.mu.jobs
		c.mu.jobs = nil
		c.mu.Unlock()
		for _, j := range jobs {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				c.run(ctx, j)
			}()
		}
		select {
		case <-c.jobsIn:
		case <-ctx.Done():
			return
		}
	}
}

func (c *Clerk) run(ctx context.Context, j job) {
	switch {
	case j.flush != nil:
		f := j.flush
		if !c.retry(ctx, "revoke callback", func() error { return c.cfg.OnRevoke(f.Table, f.Lock, f.To) }) {
			return
		}
		c.mu.Lock()
		c.flushedLocked(*f)
		c.drainLocked()
		c.mu.Unlock()
	case j.recovery != nil:
		c.recover(ctx, *j.recovery)
	case j.leaseLost:
		c.cfg.OnLeaseLost()
	}
}

// recover runs a recovery the server asked for: once the clerk may use the
// dead clerk's log lock, the owner replays the log; then the clerk reports
// it done. A lost session abandons it.
func (c *Clerk) recover(ctx context.Context, r lock.RunRecovery) {
	log := lock.LogLock(r.Dead)
	for c.Holds(r.Table, log) != lock.Write { // until the lease for the log lock's group is acknowledged
		if c.Lost() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.cfg.Tick):
		}
	}
	c.log.Info("recovering dead clerk's log", "table", r.Table, "dead", r.Dead, "dead_session", r.Session)
	if c.cfg.OnRecover == nil {
		c.log.Error("asked to recover a log but no OnRecover callback is set", "dead", r.Dead)
		return
	}
	if !c.retry(ctx, "recovery callback", func() error { return c.cfg.OnRecover(r.Table, r.Dead, r.Session) }) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.core.RecoveryDone(r.Dead, r.Session, r.Table) // ignored if the session was lost meanwhile
	c.drainLocked()
}

// retry calls f until it returns nil (true), or ctx ends or the session is
// lost (false), with backoff between failures.
func (c *Clerk) retry(ctx context.Context, what string, f func() error) bool {
	backoff := backoffMin
	for {
		err := f()
		if err == nil {
			return true
		}
		c.log.Warn(what+" failed; will retry", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(jitter(backoff)):
		}
		if c.Lost() {
			return false
		}
		backoff = min(2*backoff, backoffMax)
	}
}
