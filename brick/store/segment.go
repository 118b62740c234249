package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// segFile is what the store needs of an open segment file. *os.File
// satisfies it; tests wrap it to inject faults.
type segFile interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Close() error
}

// segment is one open segment file. Sealed segments never change; the head
// segment grows, written only by the committer.
type segment struct {
	id   uint64
	f    segFile
	size atomic.Int64 // bytes of complete, fsync'd records
	// alloc is the file's size when it is larger than size: the head
	// segment is preallocated (preallocate) and cut back when it is sealed.
	// Written by the committer (and Open) only.
	alloc int64
}

const segPrefix, segSuffix = "seg-", ".log"

func segName(id uint64) string { return fmt.Sprintf("seg-%016x.log", id) }

// parseSegName returns the id of a segment file name, or false.
func parseSegName(name string) (uint64, bool) {
	hex, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	hex, ok = strings.CutSuffix(hex, segSuffix)
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// listSegments returns the ids of the segment files in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var ids []uint64
	for _, de := range des {
		if id, ok := parseSegName(de.Name()); ok && de.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// openSegment opens an existing segment file.
func (s *Store) openSegment(id uint64) (*segment, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, segName(id)), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open segment %d: %w", id, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat segment %d: %w", id, err)
	}
	seg := &segment{id: id, f: s.wrap(f)}
	seg.size.Store(fi.Size())
	return seg, nil
}

// createSegment creates an empty segment file and makes its name durable.
func (s *Store) createSegment(id uint64) (*segment, error) {
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create segment %d: %w", id, noSpace(err))
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("create segment %d: %w", id, noSpace(err))
	}
	seg := &segment{id: id, f: s.wrap(f)}
	s.preallocate(seg)
	return seg, nil
}

// preallocate gives the head segment its whole size on disk up front:
// appending to a file changes its size, and an fsync of a size change is a
// journal commit (ext4 here, 4 KiB append + fsync: 170-260 us on a quiet
// machine, 1.1-1.4 ms on a busy one where every writer queues behind the
// one journal; into preallocated space with fdatasync 140-183 us and
// 0.32-0.39 ms). The tail
// past the last commit record reads as zeros, which a scan takes for free
// space (scan.go); sealing a segment cuts it off (seal). Without the space
// (a nearly full disk) or support for fallocate the segment grows by
// appends as before.
func (s *Store) preallocate(seg *segment) {
	f, ok := seg.f.(*os.File) // not a test's fault-injecting wrapper
	if !ok || s.opts.SegmentBytes <= seg.size.Load() {
		return
	}
	// On a nearly full disk the space is left free: for the index and the
	// metadata (diskRoom) and for the cleaner that gives space back.
	if free, err := s.freeDisk(); err == nil && free < s.opts.SegmentBytes+2*indexRoomBytes+s.balloonTarget {
		s.log.Debug("segment not preallocated: disk nearly full", "segment", seg.id, "free", free)
		return
	}
	if err := fallocate(f, s.opts.SegmentBytes); err != nil {
		s.log.Debug("segment not preallocated", "segment", seg.id, "err", err)
		return
	}
	seg.alloc = s.opts.SegmentBytes
}

// seal cuts a preallocated segment back to its records before the next
// one becomes the head, so a sealed segment's file size is its size.
func (s *Store) seal(seg *segment) error {
	s.zero.retire(seg)
	if seg.alloc == 0 {
		return nil
	}
	if err := seg.cut(seg.size.Load()); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	return nil
}

// cut truncates seg's file to n bytes, dropping its preallocation, and
// makes that durable (a torn tail at Open, a failed append, a seal).
func (seg *segment) cut(n int64) error {
	if err := seg.f.Truncate(n); err != nil {
		return fmt.Errorf("truncate segment %d to %d: %w", seg.id, n, err)
	}
	seg.alloc = 0
	if err := seg.sync(); err != nil {
		return fmt.Errorf("sync segment %d truncated to %d: %w", seg.id, n, err)
	}
	return nil
}

// sync makes what was written to seg durable: fdatasync, since only the
// data and the file's size (which fdatasync covers) matter, not its times.
func (seg *segment) sync() error {
	if f, ok := seg.f.(*os.File); ok {
		return fdatasync(f)
	}
	return seg.f.Sync()
}

func (s *Store) wrap(f *os.File) segFile {
	if s.opts.wrapFile != nil {
		return s.opts.wrapFile(f)
	}
	return f
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readChunkBytes bounds one read of a segment, so a reader holding the
// store's read lock never holds it for long.
const readChunkBytes = 4 << 20

// readRange reads [from, to) of seg in chunks, each under the store's read
// lock, so Close cannot close the file under it.
func (s *Store) readRange(seg *segment, from, to int64) ([]byte, error) {
	b := make([]byte, to-from)
	for done := int64(0); done < int64(len(b)); {
		n := min(int64(len(b))-done, readChunkBytes)
		if err := s.readSegmentAt(seg, b[done:done+n], from+done); err != nil {
			return nil, fmt.Errorf("read segment %d at %d: %w", seg.id, from+done, err)
		}
		done += n
	}
	return b, nil
}

func (s *Store) readSegmentAt(seg *segment, p []byte, off int64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	_, err := seg.f.ReadAt(p, off)
	return err
}

// noSpace maps the OS's ENOSPC (and EDQUOT) to ErrNoSpace, keeping the cause.
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%v: %w", err, ErrNoSpace)
	}
	return err
}
