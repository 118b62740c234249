package clustermap

import (
	"slices"
	"testing"
	"time"
)

func TestScheduleDue(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return ScheduledName(now.Add(-d)) }
	hourly := &SnapshotSchedule{EverySeconds: 3600, Keep: 3}
	cases := []struct {
		name  string
		sched *SnapshotSchedule
		snaps []string
		take  bool
		drop  []string
	}{
		{"no schedule", nil, []string{at(5 * time.Hour)}, false, nil},
		{"first", hourly, nil, true, nil},
		{"not due", hourly, []string{at(30 * time.Minute)}, false, nil},
		{"due", hourly, []string{at(61 * time.Minute)}, true, nil},
		{"due exactly", hourly, []string{at(time.Hour)}, true, nil},
		{"due, full", hourly, []string{at(4 * time.Hour), at(3 * time.Hour), at(2 * time.Hour)}, true, []string{at(4 * time.Hour)}},
		{"not due, over", hourly, []string{at(5 * time.Hour), at(4 * time.Hour), at(3 * time.Hour), at(2 * time.Hour), at(10 * time.Minute)},
			false, []string{at(5 * time.Hour), at(4 * time.Hour)}},
		{"manual ones stay", &SnapshotSchedule{EverySeconds: 3600, Keep: 1}, []string{"before-upgrade", "auto-garbage", at(2 * time.Hour)}, true, []string{at(2 * time.Hour)}},
	}
	for _, c := range cases {
		v := &Volume{Schedule: c.sched, Snapshots: map[string]uint64{}}
		for i, n := range c.snaps {
			v.Snapshots[n] = uint64(i)
		}
		take, drop := ScheduleDue(v, now)
		if (take != "") != c.take || (take != "" && take != ScheduledName(now)) {
			t.Errorf("%s: take %q, want %v", c.name, take, c.take)
		}
		if !slices.Equal(drop, c.drop) {
			t.Errorf("%s: drop %v, want %v", c.name, drop, c.drop)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []SnapshotSchedule{{EverySeconds: 1, Keep: 1}, {EverySeconds: 3600, Keep: 0}, {EverySeconds: 3600, Keep: 1 << 20}, {EverySeconds: -5, Keep: 2}, {EverySeconds: 1 << 40, Keep: 2}} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if err := (SnapshotSchedule{EverySeconds: 3600, Keep: 24}).Validate(); err != nil {
		t.Error(err)
	}
	if _, ok := ScheduledTime("auto-20261126T120000Z"); !ok {
		t.Error("a scheduled name does not parse")
	}
	for _, n := range []string{"auto-", "auto-2026", "x-20261126T120000Z"} {
		if _, ok := ScheduledTime(n); ok {
			t.Errorf("%q parses as a scheduled name", n)
		}
	}
}

// TestSnapshotTimes: a time needs its snapshot, and deleting a snapshot
// deletes its time.
func TestSnapshotTimes(t *testing.T) {
	m := &Map{Epoch: 1, NextVolumeID: 2, Volumes: []Volume{{ID: 1, Name: "v", Replicas: 1, ChunkBytes: 1 << 20, Gen: 4, PGs: []PG{{}},
		Snapshots: map[string]uint64{"a": 1}, SnapshotTimes: map[string]int64{"a": 1, "ghost": 2}}}}
	if err := m.validateVolume(&m.Volumes[0]); err == nil {
		t.Error("a time for a snapshot that is not was accepted")
	}
	n, err := DeleteSnapshot(&Map{Epoch: 1, Volumes: []Volume{{Name: "v", Snapshots: map[string]uint64{"a": 1}, SnapshotTimes: map[string]int64{"a": 1}}}}, "v", "a")
	if err != nil || n.Volumes[0].SnapshotTimes != nil {
		t.Errorf("delete kept the time: %v %v", n.Volumes[0].SnapshotTimes, err)
	}
}

// TestScheduleTiers: hourly and daily snapshots are thinned as restic's
// forget does: the newest of each of the last N hours (days) holding one.
func TestScheduleTiers(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 30, 0, 0, time.UTC)
	sched := &SnapshotSchedule{EverySeconds: 600, Keep: 2, KeepHourly: 3, KeepDaily: 2}
	v := &Volume{Schedule: sched, Snapshots: map[string]uint64{}}
	// Every 10 minutes for the last 50 hours.
	for d := 10 * time.Minute; d <= 50*time.Hour; d += 10 * time.Minute {
		v.Snapshots[ScheduledName(now.Add(-d))] = 0
	}
	take, drop := ScheduleDue(v, now)
	if take != ScheduledName(now) {
		t.Fatalf("take %q", take)
	}
	for _, d := range drop {
		delete(v.Snapshots, d)
	}
	var left []string
	for n := range v.Snapshots {
		left = append(left, n)
	}
	slices.Sort(left)
	want := []string{
		ScheduledName(time.Date(2026, 11, 25, 23, 50, 0, 0, time.UTC)), // daily: the newest of Nov 25 (Nov 26's is the new one)
		ScheduledName(time.Date(2026, 11, 26, 10, 50, 0, 0, time.UTC)), // hourly: 10:xx
		ScheduledName(time.Date(2026, 11, 26, 11, 50, 0, 0, time.UTC)), // hourly: 11:xx
		ScheduledName(time.Date(2026, 11, 26, 12, 20, 0, 0, time.UTC)), // keep 2 (with the new one)
	}
	// The new one (12:30) is the second of keep 2, the newest of 12:xx and of Nov 26.
	if !slices.Equal(left, want) {
		t.Fatalf("left %v\nwant %v", left, want)
	}
	if err := (SnapshotSchedule{EverySeconds: 7200, Keep: 1, KeepHourly: 5}).Validate(); err == nil {
		t.Error("hourly snapshots to keep from a schedule of one every two hours")
	}
	if got := sched.String(); got != "every 10m0s, keep 2, hourly 3, daily 2" {
		t.Errorf("String: %s", got)
	}
}
