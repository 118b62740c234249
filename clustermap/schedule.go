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
// UTC time, and delete the scheduled ones no retention rule keeps (as
// restic's forget): the newest Keep; for each of the KeepHourly most
// recent UTC hours that hold one, the newest of that hour; likewise for
// KeepDaily days. Snapshots taken by hand are never deleted by it.
type SnapshotSchedule struct {
	EverySeconds int64 `json:"every_s"`
	Keep         int   `json:"keep"`
	KeepHourly   int   `json:"keep_hourly,omitempty"`
	KeepDaily    int   `json:"keep_daily,omitempty"`
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
	if s.Keep < 1 || s.KeepHourly < 0 || s.KeepDaily < 0 || s.Keep+s.KeepHourly+s.KeepDaily > limits.SnapshotsPerVolumeMax/2 {
		return fmt.Errorf("snapshot schedule: keep %d, hourly %d, daily %d: keep must be at least 1, the others at least 0, and all together at most %d",
			s.Keep, s.KeepHourly, s.KeepDaily, limits.SnapshotsPerVolumeMax/2)
	}
	if s.KeepDaily > 0 && s.Every() > 24*time.Hour || s.KeepHourly > 0 && s.Every() > time.Hour {
		return fmt.Errorf("snapshot schedule: every %v takes fewer snapshots than the hourly or daily ones it is to keep", s.Every())
	}
	return nil
}

// String describes the schedule as the CLI takes it.
func (s SnapshotSchedule) String() string {
	out := fmt.Sprintf("every %v, keep %d", s.Every(), s.Keep)
	if s.KeepHourly > 0 {
		out += fmt.Sprintf(", hourly %d", s.KeepHourly)
	}
	if s.KeepDaily > 0 {
		out += fmt.Sprintf(", daily %d", s.KeepDaily)
	}
	return out
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
	all := slices.Clone(autos)
	if n := len(autos); n == 0 || now.Sub(autos[n-1].at) >= v.Schedule.Every() {
		if name := ScheduledName(now); !hasSnapshot(v, name) {
			take = name
			all = append(all, auto{name, now}) // the new one counts
		}
	}
	// Newest first, each rule keeps what it keeps.
	slices.Reverse(all)
	kept := map[string]bool{}
	for i := 0; i < len(all) && i < v.Schedule.Keep; i++ {
		kept[all[i].name] = true
	}
	bucket := func(n int, of func(time.Time) time.Time) {
		var last time.Time
		for _, a := range all {
			if n == 0 {
				return
			}
			if b := of(a.at.UTC()); !b.Equal(last) {
				kept[a.name], last = true, b
				n--
			}
		}
	}
	bucket(v.Schedule.KeepHourly, func(t time.Time) time.Time { return t.Truncate(time.Hour) })
	bucket(v.Schedule.KeepDaily, func(t time.Time) time.Time { return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC) })
	for _, a := range autos { // oldest first
		if !kept[a.name] {
			drop = append(drop, a.name)
		}
	}
	return take, drop
}

func hasSnapshot(v *Volume, name string) bool {
	_, ok := v.Snapshots[name]
	return ok
}
