package filesys

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Retention says which versions of a file the cleaner keeps (Mammoth
// §2.6): every version closed within All of now, the newest of each hour
// within Hourly, the newest of each day (UTC) within Daily, the newest of
// each week (ISO, UTC) within Weekly. None keeps no
// version (a scratch directory) but the newest of a file that still
// exists (what it reads now, unless changed since); Forever keeps all. A directory's policy
// is the extended attribute RetentionXattr, inherited by everything below
// it that has none of its own; the root's default is DefaultRetention.
type Retention struct {
	None, Forever              bool
	All, Hourly, Daily, Weekly time.Duration
}

// RetentionXattr holds a directory's retention policy (Retention.String).
const RetentionXattr = "user.plumeria.retention"

// DefaultRetention applies where no directory up to the root has a
// policy: every version for an hour, hourly ones for a day, daily ones for
// thirty days.
var DefaultRetention = Retention{All: time.Hour, Hourly: 24 * time.Hour, Daily: 30 * 24 * time.Hour}

// retentionMax bounds a policy's durations.
const retentionMax = 100 * 365 * 24 * time.Hour

// String renders r as ParseRetention reads it: "none", "forever", or
// "all=1h hourly=24h daily=720h" (zero durations left out).
func (r Retention) String() string {
	switch {
	case r.None:
		return "none"
	case r.Forever:
		return "forever"
	}
	var parts []string
	for _, p := range []struct {
		k string
		d time.Duration
	}{{"all", r.All}, {"hourly", r.Hourly}, {"daily", r.Daily}, {"weekly", r.Weekly}} {
		if p.d > 0 {
			parts = append(parts, p.k+"="+formatDays(p.d))
		}
	}
	return strings.Join(parts, " ")
}

// formatDays writes d in weeks or days when it is whole ones, else as Go
// does.
func formatDays(d time.Duration) string {
	if d >= week && d%week == 0 {
		return strconv.FormatInt(int64(d/week), 10) + "w"
	}
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// ParseRetention reads a policy: "none", "forever", or space-separated
// all=D, hourly=D, daily=D and weekly=D with D a Go duration (90m, 24h) or
// a number of days (30d) or weeks (52w). At least one; each at most once,
// positive, at most 100 years.
func ParseRetention(s string) (Retention, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "none":
		return Retention{None: true}, nil
	case "forever":
		return Retention{Forever: true}, nil
	case "":
		return Retention{}, fmt.Errorf("%w: empty retention policy: give none, forever, or all=D hourly=D daily=D", ErrInvalid)
	}
	var r Retention
	seen := map[string]bool{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || seen[k] {
			return Retention{}, fmt.Errorf("%w: retention %q: %q is not KEY=DURATION, or repeats a key", ErrInvalid, s, f)
		}
		seen[k] = true
		d, err := parseDays(v)
		if err != nil || d <= 0 || d > retentionMax {
			return Retention{}, fmt.Errorf("%w: retention %q: %s=%s: give a positive duration up to 100 years (90m, 24h, 30d)", ErrInvalid, s, k, v)
		}
		switch k {
		case "all":
			r.All = d
		case "hourly":
			r.Hourly = d
		case "daily":
			r.Daily = d
		case "weekly":
			r.Weekly = d
		default:
			return Retention{}, fmt.Errorf("%w: retention %q: unknown key %q (all, hourly, daily, weekly; or none, forever alone)", ErrInvalid, s, k)
		}
	}
	return r, nil
}

const week = 7 * 24 * time.Hour

func parseDays(v string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(v, "w"); ok {
		weeks, err := strconv.ParseInt(n, 10, 64)
		if err != nil || weeks > int64(retentionMax/week) {
			return 0, fmt.Errorf("bad weeks %q", v)
		}
		return time.Duration(weeks) * week, nil
	}
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days > int64(retentionMax/(24*time.Hour)) {
			return 0, fmt.Errorf("bad days %q", v)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// Keep reports which of versions closed at times closed (oldest first)
// the policy keeps at now.
func (r Retention) Keep(closed []time.Time, now time.Time) []bool {
	keep := make([]bool, len(closed))
	if r.None {
		return keep
	}
	if r.Forever {
		for i := range keep {
			keep[i] = true
		}
		return keep
	}
	newestIn := func(window time.Duration, bucket func(time.Time) time.Time) {
		seen := map[time.Time]bool{}
		for i := len(closed) - 1; i >= 0; i-- {
			age := now.Sub(closed[i])
			if age > window {
				continue // (clocks of nodes differ: no early stop)
			}
			b := bucket(closed[i])
			if !seen[b] {
				seen[b] = true
				keep[i] = true
			}
		}
	}
	if r.All > 0 {
		newestIn(r.All, func(t time.Time) time.Time { return t })
	}
	if r.Hourly > 0 {
		newestIn(r.Hourly, func(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) })
	}
	if r.Daily > 0 {
		newestIn(r.Daily, func(t time.Time) time.Time {
			u := t.UTC()
			return time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
		})
	}
	if r.Weekly > 0 {
		newestIn(r.Weekly, func(t time.Time) time.Time {
			y, w := t.UTC().ISOWeek()
			return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7*w) // one per ISO week
		})
	}
	return keep
}

// keptVersions returns the file versions of vs the policy keeps at now.
func (r Retention) keptVersions(vs []Version, now time.Time) []uint32 {
	closed := make([]time.Time, len(vs))
	for i, v := range vs {
		closed[i] = v.Closed
	}
	var out []uint32
	for i, k := range r.Keep(closed, now) {
		if k {
			out = append(out, vs[i].FVer)
		}
	}
	slices.Sort(out)
	return out
}
