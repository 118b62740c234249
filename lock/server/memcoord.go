package server

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/plumeria-fs/plumeria/lock"
)

// MemCoordinator is an in-memory coordinator for the lock service, for
// tests and single-process deployments. It keeps what the real one keeps
// in its replicated map: lock-group owners with an epoch, fences, and the
// registry of mounted sessions with their tables. It balances all groups
// over the servers subscribed to it, moving as few as it can when one
// joins (subscribes) or is killed, and it moves a group only after its
// former owner has received the assignment that takes it away.
//
// Lock servers use it through Server(id, addr); clerks resolve group
// owners with Owners and Changed; fs nodes get sessions from Mount.
type MemCoordinator struct {
	groups int

	// OnFence, if set before use, is called (outside any lock) before a
	// clerk's fence rises: a deployment fences storage here. An error
	// leaves the fence where it was (Fence and Mount return it).
	OnFence func(clerk string, session uint64) error

	moving sync.Mutex // serialises group moves (each has two phases)
	mu     struct {
		sync.Mutex
		epoch     uint64 // last epoch handed out
		published uint64 // epoch of owner, as clerks see it
		owner     []string
		servers   map[string]*memServer
		fences    map[string]uint64
		latest    map[string]uint64
		registry  map[sessKey][]string
		recovered []lock.Recovered
		changed   chan struct{} // closed and replaced when owner changes
	}
}

type sessKey struct {
	id      string
	session uint64
}

// memServer is one lock server known to the coordinator.
type memServer struct {
	id, addr string
	dead     bool    // killed; its groups went elsewhere
	sub      *memSub // its current subscription, nil if none
}

// memSub is one Events subscription: a FIFO of events, pumped to the
// subscriber's channel.
type memSub struct {
	queue  []queued
	ended  bool          // the pump returns once the queue is empty
	notify chan struct{} // capacity 1
	done   chan struct{} // closed when the pump returned
}

type queued struct {
	m   lock.Message
	ack chan struct{} // closed once the subscriber received m (or is gone)
}

var _ Coordinator = memHandle{}

// NewMemCoordinator returns a coordinator for a cluster of groups lock
// groups with no servers yet.
func NewMemCoordinator(groups int) *MemCoordinator {
	m := &MemCoordinator{groups: groups}
	m.mu.owner = make([]string, groups)
	m.mu.servers = map[string]*memServer{}
	m.mu.fences = map[string]uint64{}
	m.mu.latest = map[string]uint64{}
	m.mu.registry = map[sessKey][]string{}
	m.mu.changed = make(chan struct{})
	return m
}

// Server returns the Coordinator of lock server id, which clerks reach at
// addr. The server joins when it subscribes (Events) and gets a share of
// the groups; a server that subscribes again (restarted) gets its groups
// back at a new epoch.
func (m *MemCoordinator) Server(id, addr string) Coordinator {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.mu.servers[id]; s != nil {
		s.addr = addr
	} else {
		m.mu.servers[id] = &memServer{id: id, addr: addr}
	}
	return memHandle{m, id}
}

type memHandle struct {
	m  *MemCoordinator
	id string
}

// Events implements Coordinator. One subscription per server at a time.
func (h memHandle) Events(ctx context.Context) (<-chan lock.Message, error) {
	m := h.m
	m.mu.Lock()
	s := m.mu.servers[h.id]
	if s.sub != nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("memcoordinator: server %s already subscribed", h.id)
	}
	s.dead = false
	sub := &memSub{notify: make(chan struct{}, 1), done: make(chan struct{})}
	s.sub = sub
	m.mu.Unlock()
	ch := make(chan lock.Message)
	go m.pump(ctx, s, sub, ch)
	m.rebalance(h.id)
	return ch, nil
}

// Fence implements Coordinator.
func (h memHandle) Fence(_ context.Context, clerk string, session uint64) error {
	return h.m.fence(clerk, session, h.id)
}

// RecordRecovered implements Coordinator.
func (h memHandle) RecordRecovered(_ context.Context, clerk string, session uint64, table string) error {
	return h.m.recordRecovered(clerk, session, table)
}

// pump delivers sub's queue to ch in order until the subscription ends.
func (m *MemCoordinator) pump(ctx context.Context, s *memServer, sub *memSub, ch chan<- lock.Message) {
	defer close(ch)
	defer m.unsubscribe(s, sub)
	for {
		m.mu.Lock()
		if len(sub.queue) == 0 {
			ended := sub.ended
			m.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-sub.notify:
				continue
			case <-ctx.Done():
				return
			}
		}
		q := sub.queue[0]
		sub.queue = sub.queue[1:]
		m.mu.Unlock()
		select {
		case ch <- q.m:
			if q.ack != nil {
				close(q.ack)
			}
		case <-ctx.Done():
			if q.ack != nil {
				close(q.ack)
			}
			return
		}
	}
}

func (m *MemCoordinator) unsubscribe(s *memServer, sub *memSub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.sub == sub {
		s.sub = nil
	}
	for _, q := range sub.queue {
		if q.ack != nil {
			close(q.ack)
		}
	}
	sub.queue = nil
	close(sub.done)
}

// sendLocked queues m for s's subscription, if any; the returned channel
// (if ack) closes once s received m or unsubscribed.
func (m *MemCoordinator) sendLocked(s *memServer, msg lock.Message, ack bool) chan struct{} {
	q := queued{m: msg}
	if ack {
		q.ack = make(chan struct{})
	}
	if s.sub == nil || s.sub.ended {
		if ack {
			close(q.ack)
		}
		return q.ack
	}
	s.sub.queue = append(s.sub.queue, q)
	select {
	case s.sub.notify <- struct{}{}:
	default:
	}
	return q.ack
}

func (m *MemCoordinator) broadcastLocked(msg lock.Message) {
	for _, id := range slices.Sorted(maps.Keys(m.mu.servers)) {
		m.sendLocked(m.mu.servers[id], msg, false)
	}
}

// Kill declares lock server id dead: it is told to drop its groups (Kill
// waits until it received that, or until its subscription is gone), its
// subscription ends (so its Run returns ErrCoordinatorLost), and its
// groups go to the other servers. The caller should have stopped it, as a
// real coordinator declares dead only a server whose ownership lease ran
// out.
func (m *MemCoordinator) Kill(id string) {
	m.moving.Lock()
	defer m.moving.Unlock()
	m.mu.Lock()
	s := m.mu.servers[id]
	if s == nil || s.dead {
		m.mu.Unlock()
		return
	}
	s.dead = true
	m.mu.epoch++
	ack := m.sendLocked(s, m.assignmentLocked(id, m.mu.epoch, nil), true)
	var done chan struct{}
	if s.sub != nil {
		s.sub.ended = true
		done = s.sub.done
	}
	m.mu.Unlock()
	<-ack
	if done != nil {
		<-done
	}
	m.moveLocked("")
}

// rebalance moves groups so that every live subscribed server has its
// share; joined (if not "") is a server that just subscribed and must be
// sent its assignment even if nothing moves.
func (m *MemCoordinator) rebalance(joined string) {
	m.moving.Lock()
	defer m.moving.Unlock()
	m.moveLocked(joined)
}

// moveLocked runs with m.moving held. Phase 1 tells every server losing
// groups and waits until each received it; phase 2 publishes the new
// owners and tells everyone.
func (m *MemCoordinator) moveLocked(joined string) {
	m.mu.Lock()
	next := m.placeLocked()
	m.mu.epoch++
	epoch := m.mu.epoch
	losers := map[string]bool{}
	for g, o := range m.mu.owner {
		// A server that just subscribed serves nothing yet: it needs no
		// warning.
		if o != "" && o != joined && next[g] != o {
			losers[o] = true
		}
	}
	var acks []chan struct{}
	for _, id := range slices.Sorted(maps.Keys(losers)) {
		if s := m.mu.servers[id]; s.sub != nil && !s.dead {
			acks = append(acks, m.sendLocked(s, m.assignmentLocked(id, epoch, next), true))
		}
	}
	m.mu.Unlock()
	for _, a := range acks {
		<-a
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	moved := !slices.Equal(next, m.mu.owner)
	m.mu.owner = next
	m.mu.published = epoch
	for _, id := range slices.Sorted(maps.Keys(m.mu.servers)) {
		if s := m.mu.servers[id]; !s.dead && (id == joined || moved) {
			m.sendLocked(s, m.assignmentLocked(id, epoch, next), false)
		}
	}
	close(m.mu.changed)
	m.mu.changed = make(chan struct{})
}

// placeLocked returns the new owner of every group: groups of dead or
// unknown servers go to the least loaded live subscribed server, then
// groups move one by one from the most to the least loaded until loads
// differ by at most one.
func (m *MemCoordinator) placeLocked() []string {
	next := slices.Clone(m.mu.owner)
	var live []string
	load := map[string]int{}
	for _, id := range slices.Sorted(maps.Keys(m.mu.servers)) {
		if s := m.mu.servers[id]; !s.dead && s.sub != nil {
			live = append(live, id)
			load[id] = 0
		}
	}
	if len(live) == 0 {
		return next
	}
	for g, o := range next {
		if s := m.mu.servers[o]; o == "" || s == nil || s.dead {
			next[g] = ""
		} else if _, ok := load[o]; ok {
			load[o]++
		}
	}
	least := func() string {
		return slices.MinFunc(live, func(a, b string) int { return load[a] - load[b] })
	}
	for g := range next {
		if next[g] == "" {
			next[g] = least()
			load[next[g]]++
		}
	}
	for {
		most := slices.MaxFunc(live, func(a, b string) int { return load[a] - load[b] })
		to := least()
		if load[most]-load[to] <= 1 {
			return next
		}
		g := slices.Index(next, most)
		next[g] = to
		load[most]--
		load[to]++
	}
}

// assignmentLocked is server id's AssignGroups under owner.
func (m *MemCoordinator) assignmentLocked(id string, epoch uint64, owner []string) lock.AssignGroups {
	a := lock.AssignGroups{Epoch: epoch}
	for g, o := range owner {
		if o == id {
			a.Groups = append(a.Groups, g)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(m.mu.fences)) {
		a.Fences = append(a.Fences, m.fenceDoneLocked(c))
	}
	for _, k := range m.sortedRegistryLocked() {
		a.Sessions = append(a.Sessions, lock.Registered{Clerk: k.id, Session: k.session,
			Tables: slices.Clone(m.mu.registry[k])})
	}
	return a
}

func (m *MemCoordinator) sortedRegistryLocked() []sessKey {
	keys := slices.Collect(maps.Keys(m.mu.registry))
	slices.SortFunc(keys, func(a, b sessKey) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.session, b.session))
	})
	return keys
}

// fenceDoneLocked is clerk's fence with the registered tables of its
// fenced sessions.
func (m *MemCoordinator) fenceDoneLocked(clerk string) lock.FenceDone {
	f := lock.FenceDone{Clerk: clerk, Session: m.mu.fences[clerk]}
	for k, tables := range m.mu.registry {
		if k.id == clerk && k.session <= f.Session {
			for _, t := range tables {
				if !slices.Contains(f.Tables, t) {
					f.Tables = append(f.Tables, t)
				}
			}
		}
	}
	slices.Sort(f.Tables)
	return f
}

// Mount starts a new session of clerk with tables open: older sessions
// are fenced, and the new one is registered. It returns the session.
func (m *MemCoordinator) Mount(clerk string, tables ...string) (uint64, error) {
	m.mu.Lock()
	sn := max(m.mu.latest[clerk], m.mu.fences[clerk]) + 1
	m.mu.latest[clerk] = sn
	m.mu.Unlock()
	if sn > 1 {
		if err := m.fence(clerk, sn-1, ""); err != nil {
			return 0, err
		}
	}
	m.mu.Lock()
	m.mu.registry[sessKey{clerk, sn}] = slices.Clone(tables)
	m.mu.Unlock()
	return sn, nil
}

// Unmount ends a session cleanly: it is fenced, and stays registered until
// its (clean) log is recovered, so that servers that missed its CloseTable
// free its locks too.
func (m *MemCoordinator) Unmount(clerk string, session uint64) error {
	return m.fence(clerk, session, "")
}

// fence has OnFence put clerk's fence up to session in force, raises it,
// and tells every server; if it was already that high, only asker is told
// again.
func (m *MemCoordinator) fence(clerk string, session uint64, asker string) error {
	m.mu.Lock()
	raise := session > m.mu.fences[clerk]
	m.mu.Unlock()
	if raise && m.OnFence != nil {
		if err := m.OnFence(clerk, session); err != nil {
			return fmt.Errorf("memcoordinator: fence %s up to %d: %w", clerk, session, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	raised := session > m.mu.fences[clerk]
	if raised {
		m.mu.fences[clerk] = session
	}
	f := m.fenceDoneLocked(clerk)
	if raised {
		m.broadcastLocked(f)
	} else if s := m.mu.servers[asker]; s != nil {
		m.sendLocked(s, f, false)
	}
	return nil
}

func (m *MemCoordinator) recordRecovered(clerk string, session uint64, table string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if session > m.mu.fences[clerk] {
		return fmt.Errorf("memcoordinator: recovery of %s/%d recorded before it was fenced", clerk, session)
	}
	for k, tables := range m.mu.registry {
		if k.id == clerk && k.session <= session && slices.Contains(tables, table) {
			if tables = slices.DeleteFunc(tables, func(t string) bool { return t == table }); len(tables) == 0 {
				delete(m.mu.registry, k)
			} else {
				m.mu.registry[k] = tables
			}
		}
	}
	r := lock.Recovered{Clerk: clerk, Session: session, Table: table}
	if !slices.Contains(m.mu.recovered, r) {
		m.mu.recovered = append(m.mu.recovered, r)
	}
	m.broadcastLocked(r)
	return nil
}

// Owners returns the address of each group's owner and the map epoch (a
// clerk's resolver). Groups whose owner is dead or unknown are absent.
func (m *MemCoordinator) Owners(context.Context) (map[int]string, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]string, len(m.mu.owner))
	for g, o := range m.mu.owner {
		if s := m.mu.servers[o]; s != nil && !s.dead {
			out[g] = s.addr
		}
	}
	return out, m.mu.published, nil
}

// Changed returns a channel that is closed once the owners change after
// map epoch epoch (at once if they already have).
func (m *MemCoordinator) Changed(epoch uint64) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.published > epoch {
		c := make(chan struct{})
		close(c)
		return c
	}
	return m.mu.changed
}

// Fenced returns clerk's highest fenced session.
func (m *MemCoordinator) Fenced(clerk string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.fences[clerk]
}

// Recovered returns the recoveries recorded so far, in order.
func (m *MemCoordinator) Recovered() []lock.Recovered {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mu.recovered)
}

// Registered returns the tables the registry holds for a session.
func (m *MemCoordinator) Registered(clerk string, session uint64) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.mu.registry[sessKey{clerk, session}])
}

// Owner returns the server owning group g ("" if none).
func (m *MemCoordinator) Owner(g int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.owner[g]
}
