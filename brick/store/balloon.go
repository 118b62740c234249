package store

import (
	"fmt"
	"os"
	"path/filepath"
)

// The metadata balloon. Something other than the store may fill the disk
// under it (another program, another brick's store on the same disk):
// diskRoom then refuses every batch, a file system whose log lives on the
// brick can no longer commit, and every node that mounts it stops (the
// chaos harness's disk-full fault did that to all three fs nodes each
// time). So the store keeps part of the disk in a preallocated file,
// balloonName, that only the batches the metadata reserve is for
// (ApplyReserved: a file system's log and metadata) and the cleaner's may
// have: when one of them finds too little free space, the balloon gives
// back what it lacks. Other batches leave the balloon's whole size free
// on top of the index's room, so that space, once given back, stays for
// the metadata even with several stores on one disk. The balloon is grown
// back when the disk has ample room again.
//
// The balloon and its size are owned by the committer once Open returns.

// balloonName is the balloon's file in the store's directory.
const balloonName = "reserve.balloon"

// balloonBytesMax bounds the balloon: the index's room that diskRoom keeps
// (indexRoomBytes) plus as much again for the metadata's own batches.
const balloonBytesMax = 2 * indexRoomBytes

// balloonStep rounds what the balloon gives back.
const balloonStep = 1 << 20

// openBalloon opens (or makes) the balloon file and grows it to its target,
// min(balloonBytesMax, capacity/16), if the disk has room for it. Without
// fallocate (or on an error) the store runs without one.
func (s *Store) openBalloon() {
	s.balloonTarget = min(balloonBytesMax, s.capacity/16)
	f, err := os.OpenFile(filepath.Join(s.dir, balloonName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		s.log.Warn("no metadata balloon: a full disk stops metadata writes too", "err", err)
		return
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		s.log.Warn("no metadata balloon: a full disk stops metadata writes too", "err", err)
		return
	}
	s.balloonF = f
	s.balloon.Store(min(fi.Size(), s.balloonTarget))
	if fi.Size() > s.balloonTarget {
		if err := f.Truncate(s.balloonTarget); err != nil {
			s.log.Warn("metadata balloon not cut to its size", "err", err)
		}
	}
	if free, err := s.freeDisk(); err == nil {
		s.growBalloon(free)
	}
}

// growBalloon grows the balloon back to its target when the disk has ample
// room (the growth, twice the index's room and a segment); it returns the
// free bytes left.
func (s *Store) growBalloon(free int64) int64 {
	size := s.balloon.Load()
	if s.balloonF == nil || size >= s.balloonTarget {
		return free
	}
	grow := s.balloonTarget - size
	if free < grow+2*indexRoomBytes+s.opts.SegmentBytes {
		return free
	}
	if err := fallocate(s.balloonF, s.balloonTarget); err != nil {
		s.log.Debug("metadata balloon not grown", "err", err)
		return free
	}
	s.balloon.Store(s.balloonTarget)
	if size < s.balloonTarget/2 {
		s.log.Info("metadata balloon grown back: the disk has room again", "bytes", s.balloonTarget)
	}
	return free - grow
}

// releaseBalloon gives back at least short bytes of the balloon (rounded
// up to balloonStep) and returns how many, or 0 when it holds fewer.
func (s *Store) releaseBalloon(short int64) (int64, error) {
	size := s.balloon.Load()
	if s.balloonF == nil || short <= 0 || short > size {
		return 0, nil
	}
	give := min(size, (short+balloonStep-1)/balloonStep*balloonStep)
	if err := s.balloonF.Truncate(size - give); err != nil {
		return 0, fmt.Errorf("give back %d bytes of the metadata balloon %s: %w", give, s.balloonF.Name(), err)
	}
	s.balloon.Store(size - give)
	s.log.Warn("disk full: the metadata balloon gave back space for metadata writes", "bytes", give, "left", size-give)
	return give, nil
}

func (s *Store) closeBalloon() error {
	if s.balloonF == nil {
		return nil
	}
	return s.balloonF.Close()
}
