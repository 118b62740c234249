package clustermap

import (
	"fmt"
	"slices"
	"sort"
)

// The lock service's part of the map (DESIGN.md §3, issue B): lock servers,
// the assignment of lock groups to them, the registry of mounted clerk
// sessions with their tables, fences confirmed in force, and recent
// recovery records. Lock servers derive their events from it: AssignGroups
// from LockGroups, FenceDone from FencesInForce, Recovered from Recovered.

// LockGroupsN is the number of lock groups of every cluster. Part of the
// protocol: lock.GroupOf hashes into this many groups on every node.
const LockGroupsN = 128

// RecoveredMax bounds the recent recovery records the map keeps.
const RecoveredMax = 1024

// SessionsMax bounds the registry of mounted clerk sessions.
const SessionsMax = 4096

// LockServer is one lock server. Incarnation grows at every registration,
// so the groups of a restarted server get epochs it never saw.
type LockServer struct {
	Name        string     `json:"name"`
	Addr        string     `json:"addr"`
	State       BrickState `json:"state"`
	Incarnation uint64     `json:"incarnation"`
}

// LockGroup is the owner of one lock group and the map epoch at which it
// got the group.
type LockGroup struct {
	Server string `json:"server,omitempty"`
	Prev   string `json:"prev,omitempty"` // while Server is "": the owner it is taken from
	Epoch  uint64 `json:"epoch,omitempty"`
}

// Session is a mounted clerk session (fs node mount) and the tables whose
// logs it may have written and that are not recovered yet.
type Session struct {
	Clerk   string   `json:"clerk"`
	Session uint64   `json:"session"`
	Tables  []string `json:"tables"`
}

// RecoveredLog records that Clerk's log up to Session was recovered in Table.
type RecoveredLog struct {
	Clerk   string `json:"clerk"`
	Session uint64 `json:"session"`
	Table   string `json:"table"`
}

// LockServer returns the named lock server, or nil.
func (m *Map) LockServer(name string) *LockServer {
	for i := range m.LockServers {
		if m.LockServers[i].Name == name {
			return &m.LockServers[i]
		}
	}
	return nil
}

// PutLockServer registers (or re-registers) a lock server as up with a new
// incarnation; groups it owned get the new epoch, since a restarted server
// has lost their state and must rebuild them.
func PutLockServer(m *Map, name, addr string) (*Map, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("lock server: %w", err)
	}
	n := m.Clone()
	if s := n.LockServer(name); s != nil {
		s.Addr, s.State = addr, BrickUp
		s.Incarnation++
	} else {
		n.LockServers = append(n.LockServers, LockServer{Name: name, Addr: addr, State: BrickUp, Incarnation: 1})
		sort.Slice(n.LockServers, func(i, j int) bool { return n.LockServers[i].Name < n.LockServers[j].Name })
	}
	for i := range n.LockGroups {
		if n.LockGroups[i].Server == name {
			n.LockGroups[i].Epoch = m.Epoch + 1
		}
	}
	if r := AssignLockGroups(n, lockServersUp(n), nil); r != nil {
		return r, nil // epoch m.Epoch+1, like n
	}
	n.Epoch++
	return n, nil
}

func lockServersUp(m *Map) map[string]bool {
	up := map[string]bool{}
	for _, s := range m.LockServers {
		if s.State == BrickUp {
			up[s.Name] = true
		}
	}
	return up
}

// AssignLockGroups marks lock servers up or down by alive and moves lock
// groups so that every group has a live owner and loads differ by at most
// one. A group never goes straight from one live server to another: it is
// first taken away (Server "", Prev the old owner, a new epoch), and given
// to its new owner only once the old one has installed that map
// (installed[Prev] >= Epoch) or is down (the caller declares a server down
// only after its ownership lease ran out). Groups of down servers move at
// once. A group that gets a new owner gets the new map's epoch. Returns nil
// when nothing changes.
func AssignLockGroups(m *Map, alive map[string]bool, installed map[string]uint64) *Map {
	n := m.Clone()
	changed := false
	for i := range n.LockServers {
		s := &n.LockServers[i]
		if want := map[bool]BrickState{true: BrickUp, false: BrickDown}[alive[s.Name]]; s.State != want {
			s.State, changed = want, true
		}
	}
	var up []string
	for _, s := range n.LockServers {
		if s.State == BrickUp {
			up = append(up, s.Name)
		}
	}
	if len(up) > 0 && len(n.LockGroups) == 0 {
		n.LockGroups = make([]LockGroup, LockGroupsN)
	}
	load := map[string]int{}
	for _, g := range n.LockGroups {
		if slices.Contains(up, g.Server) {
			load[g.Server]++
		}
	}
	least := func() string {
		best := up[0]
		for _, s := range up[1:] {
			if load[s] < load[best] {
				best = s
			}
		}
		return best
	}
	inTransit := 0
	for i := range n.LockGroups {
		g := &n.LockGroups[i]
		switch {
		case g.Server != "" && slices.Contains(up, g.Server):
			continue
		case g.Server != "": // owner down: free at once
			*g = LockGroup{}
			changed = true
		}
		if len(up) == 0 {
			continue
		}
		if g.Prev != "" && slices.Contains(up, g.Prev) && installed[g.Prev] < g.Epoch {
			inTransit++
			continue // the old owner may still serve it
		}
		to := least()
		*g = LockGroup{Server: to, Epoch: m.Epoch + 1}
		load[to]++
		changed = true
	}
	// Even out: every server above its fair share gives the excess away
	// (phase one); a later round gives those groups to the least loaded.
	if len(up) > 1 && inTransit == 0 {
		total := 0
		for _, s := range up {
			total += load[s]
		}
		fair := (total + len(up) - 1) / len(up)
		for _, s := range up {
			for k := load[s] - fair; k > 0; k-- {
				for i := len(n.LockGroups) - 1; i >= 0; i-- {
					if n.LockGroups[i].Server == s {
						n.LockGroups[i] = LockGroup{Prev: s, Epoch: m.Epoch + 1}
						load[s]--
						changed = true
						break
					}
				}
			}
		}
	}
	if !changed {
		return nil
	}
	n.Epoch++
	return n
}

// OpenSession registers a new mounted session of clerk using tables: its
// number is above every earlier session of the clerk, and the fence moves
// to it, so every older session is fenced. The caller waits until the fence
// is in force (MarkFenceInForce) before the session may act.
func OpenSession(m *Map, clerk string, tables []string) (*Map, uint64, error) {
	if err := ValidName(clerk); err != nil {
		return nil, 0, fmt.Errorf("session: clerk: %w", err)
	}
	for _, t := range tables {
		if err := ValidName(t); err != nil {
			return nil, 0, fmt.Errorf("session: table: %w", err)
		}
	}
	if len(m.Sessions) >= SessionsMax {
		return nil, 0, fmt.Errorf("session: %d sessions registered already", SessionsMax)
	}
	session := max(m.FenceEpoch(clerk), 1)
	for _, s := range m.Sessions {
		if s.Clerk == clerk {
			session = max(session, s.Session+1)
		}
	}
	n := m.Clone()
	if n.Fences == nil {
		n.Fences = map[string]uint64{}
	}
	n.Fences[clerk] = session
	n.Sessions = append(n.Sessions, Session{Clerk: clerk, Session: session, Tables: slices.Clone(tables)})
	n.Epoch++
	return n, session, nil
}

// MarkFenceInForce records that clerk's fence at epoch is enforced by every
// brick (the coordinator waited for it): lock servers may now treat the
// clerk's sessions below epoch as dead and recover their logs.
func MarkFenceInForce(m *Map, clerk string, epoch uint64) *Map {
	if m.FencesInForce[clerk] >= epoch || m.FenceEpoch(clerk) < epoch {
		return nil
	}
	n := m.Clone()
	if n.FencesInForce == nil {
		n.FencesInForce = map[string]uint64{}
	}
	n.FencesInForce[clerk] = epoch
	n.Epoch++
	return n
}

// RecordRecovered records that clerk's log up to session is recovered in
// table. The sessions must be fenced in force. Table leaves those sessions'
// registry entries; an entry with no table left leaves the registry.
func RecordRecovered(m *Map, clerk string, session uint64, table string) (*Map, error) {
	if m.FencesInForce[clerk] <= session {
		return nil, fmt.Errorf("recovered: session %d of %s is not fenced yet", session, clerk)
	}
	n := m.Clone()
	var keep []Session
	for _, s := range n.Sessions {
		if s.Clerk == clerk && s.Session <= session {
			s.Tables = slices.DeleteFunc(s.Tables, func(t string) bool { return t == table })
			if len(s.Tables) == 0 {
				continue
			}
		}
		keep = append(keep, s)
	}
	n.Sessions = keep
	n.Recovered = append(n.Recovered, RecoveredLog{Clerk: clerk, Session: session, Table: table})
	if len(n.Recovered) > RecoveredMax {
		n.Recovered = slices.Clone(n.Recovered[len(n.Recovered)-RecoveredMax:])
	}
	n.Epoch++
	return n, nil
}

// CloseSession records that clerk's session left table cleanly (its log
// there is empty): the table leaves the session's registry entry, and an
// entry with no table left leaves the registry. Nil if there is no such
// entry (closed already, or recovered).
func CloseSession(m *Map, clerk string, session uint64, table string) *Map {
	i := slices.IndexFunc(m.Sessions, func(s Session) bool {
		return s.Clerk == clerk && s.Session == session && slices.Contains(s.Tables, table)
	})
	if i < 0 {
		return nil
	}
	n := m.Clone()
	s := &n.Sessions[i]
	s.Tables = slices.DeleteFunc(slices.Clone(s.Tables), func(t string) bool { return t == table })
	if len(s.Tables) == 0 {
		n.Sessions = slices.Delete(slices.Clone(n.Sessions), i, i+1)
	}
	n.Epoch++
	return n
}

// validateLocks checks the lock service's part of the map.
func (m *Map) validateLocks() error {
	for i, s := range m.LockServers {
		if err := ValidName(s.Name); err != nil {
			return fmt.Errorf("clustermap: lock server: %w", err)
		}
		if i > 0 && m.LockServers[i-1].Name >= s.Name {
			return fmt.Errorf("clustermap: lock servers not sorted or duplicate at %q", s.Name)
		}
		if s.State != BrickUp && s.State != BrickDown {
			return fmt.Errorf("clustermap: lock server %s: unknown state %q", s.Name, s.State)
		}
	}
	if len(m.LockGroups) != 0 && len(m.LockGroups) != LockGroupsN {
		return fmt.Errorf("clustermap: %d lock groups, want 0 or %d", len(m.LockGroups), LockGroupsN)
	}
	for i, g := range m.LockGroups {
		if g.Server != "" && m.LockServer(g.Server) == nil {
			return fmt.Errorf("clustermap: lock group %d: unknown server %q", i, g.Server)
		}
	}
	if len(m.Sessions) > SessionsMax || len(m.Recovered) > RecoveredMax {
		return fmt.Errorf("clustermap: %d sessions, %d recovery records exceed %d, %d", len(m.Sessions), len(m.Recovered), SessionsMax, RecoveredMax)
	}
	type sessionKey struct {
		clerk   string
		session uint64
	}
	seen := map[sessionKey]bool{}
	for _, s := range m.Sessions {
		if err := ValidName(s.Clerk); err != nil {
			return fmt.Errorf("clustermap: session: %w", err)
		}
		key := sessionKey{s.Clerk, s.Session}
		if seen[key] {
			return fmt.Errorf("clustermap: session %d of %s registered twice", s.Session, s.Clerk)
		}
		seen[key] = true
		for _, t := range s.Tables {
			if err := ValidName(t); err != nil {
				return fmt.Errorf("clustermap: session %d of %s: table: %w", s.Session, s.Clerk, err)
			}
		}
	}
	return nil
}
