package filesys

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]string{
		"none":                           "none",
		"forever":                        "forever",
		"all=1h hourly=24h daily=30d":    "all=1h0m0s hourly=1d daily=30d",
		"  daily=7d ":                    "daily=1w",
		"hourly=90m":                     "hourly=1h30m0s",
		"daily=14d weekly=52w":           "daily=2w weekly=52w",
		"all=1h0m0s hourly=1d daily=30d": "all=1h0m0s hourly=1d daily=30d",
	} {
		r, err := ParseRetention(in)
		if err != nil || r.String() != want {
			t.Fatalf("%q: %q %v, want %q", in, r.String(), err, want)
		}
		if again, err := ParseRetention(r.String()); err != nil || again != r {
			t.Fatalf("%q does not read back: %v", r.String(), err)
		}
	}
	for _, bad := range []string{"", "all", "all=", "all=-1h", "all=0s", "monthly=30d", "all=1h all=2h", "none all=1h",
		"forever daily=1d", "daily=999999d", "daily=1e9h", "all=1h, daily=2d"} {
		if _, err := ParseRetention(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q accepted: %v", bad, err)
		}
	}
	if DefaultRetention.String() != "all=1h0m0s hourly=1d daily=30d" {
		t.Fatal(DefaultRetention.String())
	}
}

func TestRetentionKeep(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	closed := []time.Time{
		ago(40 * 24 * time.Hour),            // 0: past every window
		ago(4 * 24 * time.Hour),             // 1: day -4
		ago(3*24*time.Hour + 2*time.Minute), // 2: day -3, older
		ago(3 * 24 * time.Hour),             // 3: day -3, newest of it
		ago(5*time.Hour + 30*time.Minute),   // 4: hour -6
		ago(5*time.Hour + 10*time.Minute),   // 5: hour -6, newest of it
		ago(2 * time.Hour),                  // 6: hour -2
		ago(30 * time.Minute),               // 7
		ago(10 * time.Minute),               // 8
	}
	for _, c := range []struct {
		r    Retention
		want string
	}{
		{DefaultRetention, "[false true false true false true true true true]"},
		{Retention{All: time.Hour}, "[false false false false false false false true true]"},
		{Retention{Daily: 7 * 24 * time.Hour}, "[false true false true false false false false true]"},
		{Retention{None: true}, "[false false false false false false false false false]"},
		{Retention{Weekly: 8 * week}, "[true false false false false false false false true]"}, // 1, 3, 8: one ISO week
		{Retention{Forever: true}, "[true true true true true true true true true]"},
	} {
		if got := fmt.Sprint(c.r.Keep(closed, now)); got != c.want {
			t.Errorf("%v: %s, want %s", c.r, got, c.want)
		}
	}
}
