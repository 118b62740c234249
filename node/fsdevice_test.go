package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/volume"
)

// TestFSDeviceErrors: the volume's fencing and lack of space reach the
// file system as its own sentinels, still as the volume's errors and with
// the volume's text; other errors pass unchanged.
func TestFSDeviceErrors(t *testing.T) {
	fenced := fmt.Errorf("volume v: %w: writer w epoch 3 < 4", volume.ErrFenced)
	full := fmt.Errorf("volume v: %w: brick b1", volume.ErrNoSpace)
	other := errors.New("volume v: unavailable")
	for _, c := range []struct {
		err  error
		want error // the filesys sentinel, or nil
	}{
		{fenced, filesys.ErrDeviceFenced},
		{full, filesys.ErrNoSpace},
		{other, nil},
	} {
		got := deviceError(c.err)
		if got.Error() != c.err.Error() {
			t.Errorf("%v reads %q", c.err, got)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%v: the volume's error is lost", c.err)
		}
		if c.want == nil {
			if got != c.err {
				t.Errorf("%v changed to %#v", c.err, got)
			}
			continue
		}
		if !errors.Is(got, c.want) {
			t.Errorf("%v: errors.Is(%v) false", c.err, c.want)
		}
	}
	if errors.Is(deviceError(fenced), filesys.ErrNoSpace) || errors.Is(deviceError(full), filesys.ErrDeviceFenced) {
		t.Error("a device error matches the other sentinel")
	}
	if deviceError(nil) != nil {
		t.Error("nil is an error")
	}
}
