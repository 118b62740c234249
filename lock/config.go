package lock

import "fmt"

// Config configures a Server. Time is in ticks: the I/O layer calls Tick
// once per tick interval of elapsed monotonic time (several times after a
// pause), and all nodes use the same interval.
type Config struct {
	// Groups is the number of lock groups in the cluster (GroupOf's
	// modulus). Every server and clerk must agree on it.
	Groups int
	// LeaseTicks is how long a clerk session lives without a renewal this
	// server received. Clerks believe in their lease for less (see
	// ClerkConfig.LeaseMarginTicks).
	LeaseTicks int
	// RetryTicks is how often revokes, queries and recovery requests that
	// got no answer are sent again.
	RetryTicks int
	// RebuildGraceTicks is the least time a newly acquired group waits
	// before granting. With a complete registry in AssignGroups it may be
	// 0. Without one it must be at least LeaseTicks, so that every clerk
	// the server never heard from has seen its lease for the group run out.
	RebuildGraceTicks int
}

// ClerkConfig configures a Clerk.
type ClerkConfig struct {
	ID      string // the fs node's writer id; names its log (LogLock)
	Session uint64 // incarnation: the fence epoch the node mounted with
	Groups  int    // as Config.Groups
	// LeaseTicks must equal the servers'. The clerk stops believing in a
	// grant LeaseTicks-LeaseMarginTicks after it sent the last renewal a
	// server acknowledged; a server declares it dead LeaseTicks after it
	// received the last renewal. Sending precedes receiving, so the clerk
	// always gives up first; the margin covers tick-rate drift.
	LeaseTicks       int
	LeaseMarginTicks int
	RetryTicks       int // resend pending requests
	IdleTicks        int // release locks unused this long; 0 never
}

func (c Config) validate() error {
	switch {
	case c.Groups < 1 || c.Groups > GroupsMax:
		return fmt.Errorf("%w: groups %d not in [1, %d]", ErrConfig, c.Groups, GroupsMax)
	case c.LeaseTicks < 6:
		return fmt.Errorf("%w: lease %d ticks < 6", ErrConfig, c.LeaseTicks)
	case c.RetryTicks < 1:
		return fmt.Errorf("%w: retry %d ticks < 1", ErrConfig, c.RetryTicks)
	case c.RebuildGraceTicks < 0:
		return fmt.Errorf("%w: negative rebuild grace", ErrConfig)
	}
	return nil
}

func (c ClerkConfig) validate() error {
	switch {
	case c.ID == "" || len(c.ID) > NameBytesMax:
		return fmt.Errorf("%w: clerk id %q", ErrConfig, c.ID)
	case c.Groups < 1 || c.Groups > GroupsMax:
		return fmt.Errorf("%w: groups %d not in [1, %d]", ErrConfig, c.Groups, GroupsMax)
	case c.LeaseTicks < 6:
		return fmt.Errorf("%w: lease %d ticks < 6", ErrConfig, c.LeaseTicks)
	case c.LeaseMarginTicks < 1 || c.LeaseMarginTicks >= c.LeaseTicks/3:
		return fmt.Errorf("%w: lease margin %d not in [1, lease/3)", ErrConfig, c.LeaseMarginTicks)
	case c.RetryTicks < 1:
		return fmt.Errorf("%w: retry %d ticks < 1", ErrConfig, c.RetryTicks)
	case c.IdleTicks < 0:
		return fmt.Errorf("%w: negative idle ticks", ErrConfig)
	}
	return nil
}

// renewTicks is how often a clerk renews: three tries per lease.
func (c ClerkConfig) renewTicks() int { return c.LeaseTicks / 3 }
