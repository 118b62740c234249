package node

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/limits"
	lockclerk "github.com/plumeria-fs/plumeria/lock/clerk"
)

// LockResolver tells a lock clerk which lock server owns each group, from
// the coordinator's map (polled every heartbeat interval while watched).
type LockResolver struct {
	cc *coordclient.Client
	mu struct {
		sync.Mutex
		m       *clustermap.Map
		changed chan struct{}
		polling bool
	}
}

var _ lockclerk.Resolver = (*LockResolver)(nil)

// NewLockResolver returns a resolver over the coordinators of cc.
func NewLockResolver(cc *coordclient.Client) *LockResolver {
	r := &LockResolver{cc: cc}
	r.mu.m = &clustermap.Map{}
	r.mu.changed = make(chan struct{})
	return r
}

func owners(m *clustermap.Map) map[int]string {
	out := map[int]string{}
	for i, g := range m.LockGroups {
		if s := m.LockServer(g.Server); s != nil && s.State == clustermap.BrickUp {
			out[i] = s.Addr
		}
	}
	return out
}

// mapTimeout bounds one fetch of the map: a coordinator that does not
// answer must not hold up the clerk's view of the owners (the clerk asks
// again after a backoff, the poller after a heartbeat interval).
const mapTimeout = 2 * time.Second

// Owners fetches the newest map and returns each group's owner address.
func (r *LockResolver) Owners(ctx context.Context) (map[int]string, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, mapTimeout)
	defer cancel()
	m, err := r.cc.Map(ctx, 0)
	if err != nil {
		return nil, 0, err
	}
	r.update(m)
	r.mu.Lock()
	defer r.mu.Unlock()
	return owners(r.mu.m), r.mu.m.Epoch, nil
}

func (r *LockResolver) update(m *clustermap.Map) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.Epoch <= r.mu.m.Epoch {
		return
	}
	old := r.mu.m
	r.mu.m = m
	if !maps.Equal(owners(old), owners(m)) {
		close(r.mu.changed)
		r.mu.changed = make(chan struct{})
	}
}

// Changed returns a channel closed once the owners change after epoch.
func (r *LockResolver) Changed(epoch uint64) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.polling {
		r.mu.polling = true
		go r.poll()
	}
	if r.mu.m.Epoch > epoch {
		// A newer map is known: the caller re-reads Owners.
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return r.mu.changed
}

// poll follows the map for as long as the process runs.
func (r *LockResolver) poll() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), mapTimeout)
		if m, err := r.cc.Map(ctx, 0); err == nil {
			r.update(m)
		}
		cancel()
		time.Sleep(limits.HeartbeatInterval)
	}
}
