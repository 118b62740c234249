package filesys

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/filesys/fstest"
	"github.com/plumeria-fs/plumeria/filesys/layout"
)

// gateDevice holds writes of one file's data until released, and notes
// every write to the log region.
type gateDevice struct {
	*memDevice
	mu      sync.Mutex
	ino     uint64        // whose data writes wait for open
	open    chan struct{} // closed: data writes go on
	held    chan struct{} // a data write of ino is waiting (cap 1)
	logged  chan struct{} // a log write happened (cap 1)
	dataDue int           // data writes of ino not yet finished
	early   bool          // a log write came while a data write of ino waited
}

func (d *gateDevice) WriteData(ctx context.Context, p []byte, off uint64) error {
	d.mu.Lock()
	ino, open := d.ino, d.open
	mine := ino != 0 && layout.ExtentAddr(ino) <= off && off < layout.ExtentAddr(ino)+layout.ExtentBytes
	if mine {
		d.dataDue++
	}
	d.mu.Unlock()
	if mine {
		select {
		case d.held <- struct{}{}:
		default:
		}
		<-open
		defer func() { d.mu.Lock(); d.dataDue--; d.mu.Unlock() }()
	}
	return d.memDevice.WriteData(ctx, p, off)
}

func (d *gateDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	if layout.LogBase <= off && off < layout.LogAddr(layout.SlotsMax) {
		d.mu.Lock()
		d.early = d.early || d.dataDue > 0
		d.mu.Unlock()
		select {
		case d.logged <- struct{}{}:
		default:
		}
	}
	return d.memDevice.WriteMeta(ctx, p, off)
}

// gate makes ino's next data writes wait until the returned func is called.
func (d *gateDevice) gate(ino uint64) (release func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ino, d.open, d.early = ino, make(chan struct{}), false
	d.held, d.logged = make(chan struct{}, 1), make(chan struct{}, 1)
	open := d.open
	return sync.OnceFunc(func() { close(open) })
}

// TestOrderedDataPerBatch: a log batch holding a write that makes bytes
// visible (a larger size) waits for those bytes; one holding only
// overwrites inside the file's size (new times) does not, so an fsync's
// data and log writes overlap. It fails if the barrier waits for every
// batch (the second half) or for none (the first).
func TestOrderedDataPerBatch(t *testing.T) {
	ctx := context.Background()
	dev := &gateDevice{memDevice: formatted(t)}
	fs, err := Open(ctx, Config{Dev: dev, Locker: fstest.SoloLocker{}, Table: "v", ID: "a", Session: 1, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close(ctx)
	f, err := fs.Create(ctx, RootIno, "f", 0o644, Caller{}, true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 8192) // 128 KiB: past the inline area
	if _, err := fs.Write(ctx, f.Ino, f.Gen, data[:64<<10], 0, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(ctx, f.Ino, false); err != nil {
		t.Fatal(err)
	}

	// Appending: the batch with the larger size must wait for the bytes.
	release := dev.gate(f.Ino)
	defer release() // before Close, which waits for the data
	if _, err := fs.Write(ctx, f.Ino, f.Gen, data[64<<10:], 64<<10, false); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fs.Fsync(ctx, f.Ino, false) }()
	<-dev.held
	select {
	case <-dev.logged:
		t.Fatal("the log batch growing the file was written while its data write waited")
	case err := <-done:
		t.Fatalf("fsync returned (%v) while the file's data write waited", err)
	case <-time.After(200 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if dev.early {
		t.Fatal("a log write came while the appended data waited")
	}

	// Overwriting inside the size: the batch (new times) goes out at once.
	release2 := dev.gate(f.Ino)
	defer release2()
	if _, err := fs.Write(ctx, f.Ino, f.Gen, []byte("overwrite"), 4096, false); err != nil {
		t.Fatal(err)
	}
	go func() { done <- fs.Fsync(ctx, f.Ino, false) }()
	<-dev.held
	select {
	case <-dev.logged:
	case err := <-done:
		t.Fatalf("fsync returned (%v) while the file's data write waited", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the log batch of an overwrite waited for its data (10 s)")
	}
	select {
	case err := <-done:
		t.Fatalf("fsync returned (%v) while the file's data write waited", err)
	default:
	}
	release2()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if _, err := fs.Read(ctx, f.Ino, f.Gen, got, 4096); err != nil || string(got[:9]) != "overwrite" {
		t.Fatalf("read back %q, %v", got, err)
	}
}
