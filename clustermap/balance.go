package clustermap

import "math"

// BrickBalance is one brick's place in the balance rule 6 of Reconcile
// works towards: within its class, PG replicas in proportion to capacity.
type BrickBalance struct {
	Name   string  `json:"name"`
	Class  string  `json:"class"`
	Units  int     `json:"replicas"` // PG replicas it holds, leaving ones counted where they go
	Target float64 `json:"target"`   // its class's replicas × its capacity / its class's capacity
	Full   bool    `json:"full,omitempty"`
}

// Balance returns the balance of the bricks that are up and not draining,
// by class then name, and the largest |Units - Target| among those that
// are not full: how far the cluster is from the balance rule 6 seeks. At
// its fixpoint (no PG syncing, every move possible) the deviation is below
// two except where the hard rules leave no better placement.
func Balance(m *Map) (bricks []BrickBalance, deviation float64) {
	for _, pool := range pools(m, loadOf(m)) {
		for _, b := range pool {
			bricks = append(bricks, BrickBalance{Name: b.name, Class: b.class, Units: b.units, Target: b.target, Full: b.full})
			if !b.full {
				deviation = math.Max(deviation, math.Abs(b.dev))
			}
		}
	}
	return bricks, deviation
}

// Fullness thresholds of MarkFull, as fractions of a brick's capacity: a
// brick is marked full at FullAbove and cleared below FullBelow, so one
// near the line does not flip the map at every report.
const (
	FullAbove = 0.90
	FullBelow = 0.85
)

// Usage is what a brick last reported of its store.
type Usage struct{ Used, Capacity int64 }

// MarkFull sets or clears Brick.Full from the bricks' reported usage (a
// brick without a report keeps its mark) and returns the new map, or nil
// when nothing changes. A full brick takes no new PG members, and
// Reconcile moves members off it (rule 6).
func MarkFull(m *Map, usage map[string]Usage) *Map {
	var n *Map
	for i := range m.Bricks {
		b := &m.Bricks[i]
		u, ok := usage[b.Name]
		if !ok || u.Capacity <= 0 {
			continue
		}
		frac := float64(u.Used) / float64(u.Capacity)
		full := b.Full
		switch {
		case frac >= FullAbove:
			full = true
		case frac < FullBelow:
			full = false
		}
		if full == b.Full {
			continue
		}
		if n == nil {
			n = m.Clone()
			n.Epoch++
		}
		n.Bricks[i].Full = full
	}
	return n
}
