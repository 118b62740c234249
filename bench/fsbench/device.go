package fsbench

import (
	"context"
	"fmt"
	"os"
)

// Device is what the block workloads (sequential, random, fsync latency)
// need of their target: positioned reads and writes, and a sync that makes
// every write before it durable. A Plumeria volume (*volume.Volume) has
// this method set: its Sync does nothing, since a WriteAt returns only once
// the bytes are durable on every replica. Run gives the workloads a file on
// the directory under test, RunFile a local file.
//
// ReadAt fills all of p or returns an error. The random workloads call
// ReadAt and WriteAt from RandQD goroutines at once, on disjoint pages.
type Device interface {
	ReadAt(ctx context.Context, p []byte, off uint64) error
	WriteAt(ctx context.Context, p []byte, off uint64) error
	Sync(ctx context.Context) error
}

// target is a Device as one block workload sees it: name is the file or
// device in log lines and errors, drop evicts what a cache below the
// Device holds of it (nil: no such cache).
type target struct {
	dev  Device
	name string
	drop func() error
}

// fileDevice is an open local file as a Device: Sync is fsync(2), or
// fdatasync(2) with dataSync.
type fileDevice struct {
	f        *os.File
	dataSync bool
}

func (d fileDevice) ReadAt(_ context.Context, p []byte, off uint64) error {
	_, err := d.f.ReadAt(p, int64(off))
	return err
}

func (d fileDevice) WriteAt(_ context.Context, p []byte, off uint64) error {
	_, err := d.f.WriteAt(p, int64(off))
	return err
}

func (d fileDevice) Sync(context.Context) error {
	if d.dataSync {
		return fdatasync(d.f)
	}
	return d.f.Sync()
}

// fileTarget is f as a target whose sync is fsync(2) and whose pages are
// dropped from the page cache before timed reads.
func fileTarget(f *os.File) target {
	return target{dev: fileDevice{f: f}, name: f.Name(), drop: func() error { return dropCache(f) }}
}

// section is the part of a Device from base on, so that the workloads of
// RunDevice each write a range of their own, as they each write a file of
// their own under Run.
type section struct {
	Device
	base uint64
}

func (s section) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return s.Device.ReadAt(ctx, p, s.base+off)
}

func (s section) WriteAt(ctx context.Context, p []byte, off uint64) error {
	return s.Device.WriteAt(ctx, p, s.base+off)
}

// sectionAlign aligns the sections of RunDevice (a volume's chunk, 1 MiB
// by default, so that no chunk holds two workloads).
const sectionAlign = 1 << 20

// DeviceBytes is how many bytes from offset 0 RunDevice with cfg writes:
// the sequential, random and fsync sections one after the other, each
// starting at a multiple of 1 MiB.
func DeviceBytes(cfg Config) uint64 {
	var end uint64
	for _, s := range deviceSections(cfg) {
		end = max(end, s.base+s.bytes)
	}
	return end
}

type deviceSection struct {
	base, bytes uint64
	skip        bool
}

// deviceSections are the sequential, random and fsync sections of cfg.
func deviceSections(cfg Config) [3]deviceSection {
	align := func(n uint64) uint64 { return (n + sectionAlign - 1) / sectionAlign * sectionAlign }
	seq := uint64(cfg.SeqSize)
	rnd := uint64(cfg.RandSize / PageSize * PageSize)
	if cfg.RandOps == 0 {
		rnd = 0
	}
	fs := uint64(0)
	if cfg.FsyncOps > 0 {
		fs = fsyncFileBytes
	}
	return [3]deviceSection{
		{0, seq, seq == 0},
		{align(seq), rnd, rnd == 0},
		{align(seq) + align(rnd), fs, fs == 0},
	}
}

// RunDevice runs the block workloads of cfg on dev, in this order:
// sequential (seq_write_fsync, seq_read), random (rand_read_4k,
// rand_write_4k, rand_mixed_qdN) and fsync latency
// (write_fsync_4k_latency, write_fsync_4k_latency_p99), with the names,
// units and checks they have under Run. Each writes its own range of dev
// from offset 0 (DeviceBytes in all) where Run writes a file; "fsync" is
// dev.Sync. If dev has a method DropCache() error, it is called where Run
// drops a file's page cache. The other workloads of cfg (files, mkdirs,
// tree) are not run. name is dev in log lines and errors. On error it
// returns the results so far and an error naming the workload.
func RunDevice(ctx context.Context, dev Device, name string, cfg Config) ([]Result, error) {
	cfg.Files, cfg.Mkdirs, cfg.TreeFiles = 0, 0, 0
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &runner{ctx: ctx, dir: name, cfg: cfg}
	var drop func() error
	if d, ok := dev.(interface{ DropCache() error }); ok {
		drop = d.DropCache
	}
	secs := deviceSections(cfg)
	steps := [3]func(target) error{
		func(t target) error {
			p := r.seqPattern()
			if err := r.seqWrite(t, p); err != nil {
				return err
			}
			return r.seqRead(t, p)
		},
		r.randomOn,
		r.fsyncOn,
	}
	for i, s := range secs {
		if s.skip {
			continue
		}
		if err := ctx.Err(); err != nil {
			return r.out, err
		}
		t := target{dev: section{dev, s.base}, name: fmt.Sprintf("%s from offset %d", name, s.base), drop: drop}
		if err := steps[i](t); err != nil {
			return r.out, err
		}
	}
	return r.out, nil
}

// RunFile runs RunDevice on a new local file at path (which must not
// exist) and removes it afterwards. Its Sync is fdatasync(2) where the
// platform has it: the data and what is needed to read it back durable,
// not the timestamps, as a volume's acknowledged write.
func RunFile(ctx context.Context, path string, cfg Config) ([]Result, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	res, err := RunDevice(ctx, localFile{fileDevice{f: f, dataSync: true}}, path, cfg)
	if cerr := f.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if rerr := os.Remove(path); rerr != nil && err == nil {
		err = rerr
	}
	return res, err
}

// localFile is the Device of RunFile.
type localFile struct{ fileDevice }

func (l localFile) DropCache() error { return dropCache(l.f) }
