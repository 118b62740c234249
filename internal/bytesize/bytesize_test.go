package bytesize

import (
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  string
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "64KiB", want: 64 << 10},
		{in: "1G", want: 1 << 30},
		{in: "3TiB", want: 3 << 40},
		{in: "10B", want: 10},
		{in: "0x10", want: 16},
		{in: "", err: "not a size"},
		{in: "big", err: "not a size"},
		{in: "-1", err: "not a size"},
		{in: "1.5GiB", err: "not a size"},
		{in: "17179869184TiB", err: "64 bits"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseInt64(t *testing.T) {
	if n, err := ParseInt64(""); n != 0 || err != nil {
		t.Errorf("ParseInt64(\"\") = %d, %v; want 0, nil", n, err)
	}
	if n, err := ParseInt64("4EiB"); err == nil { // no EiB unit
		t.Errorf("ParseInt64(4EiB) = %d, want an error", n)
	}
	if _, err := ParseInt64("4194305TiB"); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("ParseInt64(4194305TiB) error %v, want too large", err)
	}
	if n, err := ParseInt64("100GiB"); n != 100<<30 || err != nil {
		t.Errorf("ParseInt64(100GiB) = %d, %v", n, err)
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 2 << 30: "2.0 GiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1", "64KiB", "1G", "18446744073709551615", "17179869184TiB", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		// Whatever parses names a byte count that parses back unchanged.
		if m, err := Parse(strconv.FormatUint(n, 10)); err != nil || m != n {
			t.Fatalf("Parse(%q) = %d, but %d reparses as %d, %v", s, n, n, m, err)
		}
	})
}
