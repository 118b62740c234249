package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/internal/pb"
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

// TestFSDeviceKinds: through FSDevice, WriteMetaBlocks are versioned (a
// late write of an older block changes nothing) while WriteData are not;
// file data stop at the bricks' metadata reserve with filesys.ErrNoSpace
// while WriteMeta and WriteMetaBlocks still fit; a fenced writer gets
// filesys.ErrDeviceFenced.
func TestFSDeviceKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tc := newTestCluster(t, 0)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range 3 {
		name := fmt.Sprintf("b%d", i)
		b, err := Start(context.Background(), Config{Name: name, Listen: "127.0.0.1:0", DataDir: filepath.Join(tc.dir, name), Brick: true,
			Coord: []string{tc.coord.Addr()}, Domain: map[string]string{"host": name}, CapacityBytes: 8 << 20, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		tc.bricks = append(tc.bricks, b)
	}
	tc.createVolume("v", 3)
	ctx := context.Background()
	v := tc.openVolume("v")
	d := NewFSDevice(v)

	block := func(version uint64, fill byte) []byte {
		p := bytes.Repeat([]byte{fill}, layout.BlockBytes)
		layout.SetVersion(p, version)
		return p
	}
	const metaOff = layout.InodeBase
	for _, step := range []struct {
		version uint64
		fill    byte
		want    []byte
	}{
		{5, 'a', block(5, 'a')},
		{3, 'b', block(5, 'a')}, // late: an older version
		{6, 'c', block(6, 'c')},
	} {
		if err := d.WriteMetaBlocks(ctx, block(step.version, step.fill), metaOff); err != nil {
			t.Fatalf("WriteMetaBlocks of version %d: %v", step.version, err)
		}
		if got := readAt(t, v, metaOff, layout.BlockBytes); !bytes.Equal(got, step.want) {
			t.Fatalf("after WriteMetaBlocks of version %d: block holds version %d", step.version, layout.Version(got))
		}
	}
	if err := d.WriteData(ctx, block(1, 'd'), metaOff); err != nil || !bytes.Equal(readAt(t, v, metaOff, layout.BlockBytes), block(1, 'd')) {
		t.Fatalf("WriteData over a newer block did not land: %v", err)
	}

	// File data until a brick refuses them, by 64 KiB then by 4 KiB.
	data := bytes.Repeat([]byte{'x'}, 64<<10)
	var full error
	off := uint64(layout.DataBase)
	for i := 0; i < 1024 && full == nil; i++ {
		if full = d.WriteData(ctx, data, off); full == nil {
			off += uint64(len(data))
		}
	}
	for i := 0; i < 64 && errors.Is(full, filesys.ErrNoSpace); i++ {
		if err := d.WriteData(ctx, data[:layout.BlockBytes], off); err != nil {
			full = err
			break
		}
		off += layout.BlockBytes
	}
	switch {
	case full == nil:
		t.Fatal("64 MiB of file data fit on bricks of 8 MiB")
	case !errors.Is(full, filesys.ErrNoSpace) || !errors.Is(full, volume.ErrNoSpace):
		t.Fatalf("WriteData on full bricks: %v, want filesys.ErrNoSpace wrapping volume.ErrNoSpace", full)
	}
	t.Logf("file data refused: %v", full)
	if err := d.WriteMeta(ctx, block(0, 'l'), layout.LogBase); err != nil {
		t.Errorf("WriteMeta on bricks full of data: %v", err)
	}
	if err := d.WriteMetaBlocks(ctx, block(7, 'e'), metaOff); err != nil {
		t.Errorf("WriteMetaBlocks on bricks full of data: %v", err)
	}

	err := tc.cl.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.Fence(ctx, &pb.FenceRequest{Writer: "w"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"WriteData":       d.WriteData(ctx, block(8, 'f'), metaOff),
		"WriteMeta":       d.WriteMeta(ctx, block(0, 'f'), layout.LogBase),
		"WriteMetaBlocks": d.WriteMetaBlocks(ctx, block(8, 'f'), metaOff),
		"Decommit":        d.Decommit(ctx, layout.DataBase, uint64(len(data))),
	} {
		if !errors.Is(err, filesys.ErrDeviceFenced) || !errors.Is(err, volume.ErrFenced) {
			t.Errorf("%s by a fenced writer: %v, want filesys.ErrDeviceFenced wrapping volume.ErrFenced", what, err)
		}
	}
}
