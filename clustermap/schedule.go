package clustermap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/plumeria-fs/plumeria/internal/limits"
)

// SnapshotSchedule has the coordinators' leader take a file-system
// snapshot of a volume every EverySeconds, named ScheduledPrefix + its
// UTC time, and delete the oldest scheduled ones beyond Keep. Snapshots
// taken by hand are never deleted by it.
type SnapshotSchedule struct {
	EverySeconds int64 `json:"every_s"`
	Keep         int   `json:"keep"`
}

// Bounds of a schedule.
const (
	ScheduleEveryMin = 5 * time.Second
	ScheduleEveryMax = 366 * 24 * time.Hour
	// ScheduledPrefix starts the names of scheduled snapshots; the rest is
	// their time, ScheduledLayout in UTC.
	ScheduledPrefix = "auto-"
	ScheduledLayout = "20060102T150405Z"
)

// Every is the schedule's period.
func (s SnapshotSchedule) Every() time.Duration { return time.Duration(s.EverySeconds) * time.Second }

// Validate says what makes no sense in s.
func (s SnapshotSchedule) Validate() error {
	if e := s.Every(); e < ScheduleEveryMin || e > ScheduleEveryMax {
		return fmt.Errorf("snapshot schedule: every %v is not in [%v, %v]", e, ScheduleEveryMin, ScheduleEveryMax)
	}
	if s.Keep < 1 || s.Keep > limits.SnapshotsPerVolumeMax/2 {
		return fmt.Errorf("snapshot schedule: keep %d is not in [1, %d]", s.Keep, limits.SnapshotsPerVolumeMax/2)
	}
	return nil
}

// ScheduledName is the name of a scheduled snapshot taken at t.
func ScheduledName(t time.Time) string { return ScheduledPrefix + t.UTC().Format(ScheduledLayout) }

// ScheduledTime parses a scheduled snapshot's name; ok is false for any
// other name.
func ScheduledTime(name string) (t time.Time, ok bool) {
	rest, found := strings.CutPrefix(name, ScheduledPrefix)
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(ScheduledLayout, rest)
	return t, err == nil
}

// ScheduleDue decides, for volume v at time now, whether a scheduled
// snapshot is due (take: its name, "" if none) and which scheduled
// snapshots to delete (the oldest beyond Keep, counting the one taken
// now). Pure: the caller (node's scheduler) does the I/O.
func ScheduleDue(v *Volume, now time.Time) (take string, drop []string) {
	if v.Schedule == nil {
		return "", nil
	}
	type auto struct {
		name string
		at   time.Time
	}
	var autos []auto
	for name := range v.Snapshots {
		if t, ok := ScheduledTime(name); ok {
			autos = append(autos, auto{name, t})
		}
	}
	slices.SortFunc(autos, func(a, b auto) int { return a.at.Compare(b.at) })
	keep := v.Schedule.Keep
	if n := len(autos); n == 0 || now.Sub(autos[n-1].at) >= v.Schedule.Every() {
		if name := ScheduledName(now); !hasSnapshot(v, name) {
			take = name
			keep-- // the new one counts
		}
	}
	for i := 0; i < len(autos)-max(keep, 0); i++ {
		drop = append(drop, autos[i].name)
	}
	return take, drop
}

func hasSnapshot(v *Volume, name string) bool {
	_, ok := v.Snapshots[name]
	return ok
}
