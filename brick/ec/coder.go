package ec

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"

	"github.com/klauspost/reedsolomon"
)

var (
	// ErrTooFewShards is returned when more than M shards are missing.
	ErrTooFewShards = errors.New("ec: too few shards to reconstruct")
	// ErrShardSize is returned for a shard set of the wrong count, or with
	// shards of unequal sizes or of a size not a multiple of BlockBytes.
	ErrShardSize = errors.New("ec: wrong shard count or size")
)

// Coder codes the stripes of one profile and chunk size. Its methods take
// a shard set: a slice of K+M shards in stripe-group order (data shards
// first), each either missing (nil or empty) or present; the present ones
// are equally long, a multiple of BlockBytes. Any length works because
// each byte position codes independently: whole shards for a stripe, or
// the single blocks at one offset o of every shard for a degraded read of
// one block. A Coder is safe for concurrent use and starts no goroutines.
type Coder struct {
	Geometry
	rs reedsolomon.Encoder // nil for a mirror
}

// NewCoder returns a coder for stripes of p over chunks of chunkBytes; the
// errors are those of NewGeometry. Make one per profile and reuse it: it
// caches the decoding matrices of the erasure patterns it has seen.
func NewCoder(p Profile, chunkBytes int) (*Coder, error) {
	g, err := NewGeometry(p, chunkBytes)
	if err != nil {
		return nil, err
	}
	c := &Coder{Geometry: g}
	if !p.Mirror() {
		// One goroutine: the caller decides what runs in parallel, and at
		// 4 KiB to 256 KiB per shard splitting gains nothing.
		c.rs, err = reedsolomon.New(p.K, p.M, reedsolomon.WithMaxGoroutines(1))
		if err != nil {
			return nil, fmt.Errorf("reedsolomon %s: %w", p, err)
		}
	}
	return c, nil
}

// Encode codes the live bytes of a chunk, chunk[0:len(chunk)] (its live
// blocks are [0, n) with n = ceil(len(chunk)/BlockBytes)), into K+M shards
// of ShardLen(n) blocks each: data shard j holds the chunk's blocks j,
// j+K, j+2K, ... (Geometry.BlockAt), zero-padded past len(chunk), and
// parity codes them; a
// mirror's shards are M+1 copies of data shard 0. An empty chunk gives
// empty shards (len 0). The shards share one new allocation; chunk is not
// retained. It returns an error wrapping ErrInvalid if chunk is longer
// than ChunkBytes().
func (c *Coder) Encode(chunk []byte) ([][]byte, error) {
	if len(chunk) > c.ChunkBytes() {
		return nil, fmt.Errorf("encode %d bytes into a chunk of %d: %w", len(chunk), c.ChunkBytes(), ErrInvalid)
	}
	n := (len(chunk) + BlockBytes - 1) / BlockBytes
	size := c.ShardLen(n) * BlockBytes
	if size == 0 {
		shards := make([][]byte, c.p.Shards())
		for i := range shards {
			shards[i] = []byte{}
		}
		return shards, nil
	}
	shards := reedsolomon.AllocAligned(c.p.Shards(), size)
	for b := range n {
		j, o := c.BlockPlace(b)
		copy(shards[j][o*BlockBytes:(o+1)*BlockBytes], chunk[b*BlockBytes:min((b+1)*BlockBytes, len(chunk))])
	}
	if c.rs == nil {
		for i := 1; i < len(shards); i++ {
			copy(shards[i], shards[0])
		}
		return shards, nil
	}
	if err := c.rs.Encode(shards); err != nil {
		panic(fmt.Sprintf("ec: encode %s shards of %d bytes: %v", c.p, size, err))
	}
	return shards, nil
}

// ReconstructData fills in the missing data shards of a shard set, in
// place: a missing shard's own capacity is reused when it suffices, else
// it is allocated. Parity shards stay missing. It returns an error
// wrapping ErrShardSize for a malformed set, or ErrTooFewShards (saying
// how many are missing) when fewer than K shards are present. The result
// is only as good as the survivors: a corrupt one yields wrong data.
func (c *Coder) ReconstructData(shards [][]byte) error {
	want := make([]bool, c.p.Shards())
	for j := range c.p.K {
		want[j] = true
	}
	return c.ReconstructSome(shards, want)
}

// ReconstructSome fills in, in place, the missing shards i of a shard set
// with want[i] true (len(want) = K+M): a rebuild asks for the positions it
// restores, parity included. Errors as for ReconstructData; asking for no
// missing shard is not an error, whatever else is missing.
func (c *Coder) ReconstructSome(shards [][]byte, want []bool) error {
	if len(want) != c.p.Shards() {
		return fmt.Errorf("%s stripe: want of %d shards: %w", c.p, len(want), ErrShardSize)
	}
	size, missing, err := c.check(shards)
	if err != nil {
		return err
	}
	wanted := 0
	for i, s := range shards {
		if len(s) == 0 && want[i] {
			wanted++
		}
	}
	if wanted == 0 {
		return nil
	}
	if missing > c.p.M {
		return c.tooFew(missing)
	}
	if c.rs != nil {
		if err := c.rs.ReconstructSome(shards, want); err != nil {
			panic(fmt.Sprintf("ec: reconstruct %s shards of %d bytes, %d missing: %v", c.p, size, missing, err))
		}
		return nil
	}
	var src []byte
	for _, s := range shards {
		if len(s) != 0 {
			src = s
			break
		}
	}
	for i, s := range shards {
		if len(s) == 0 && want[i] {
			if cap(s) < size {
				s = make([]byte, size)
			}
			shards[i] = s[:size]
			copy(shards[i], src)
		}
	}
	return nil
}

// Verify reports whether the parity of a full shard set matches its data
// (a mirror: whether the copies are equal). It says nothing about which
// shard is wrong: the store's per-block crc32c does. It returns an error
// wrapping ErrShardSize for a malformed set, or ErrTooFewShards when any
// shard is missing.
func (c *Coder) Verify(shards [][]byte) (bool, error) {
	_, missing, err := c.check(shards)
	if err != nil {
		return false, err
	}
	if missing > 0 {
		return false, fmt.Errorf("%s stripe: verify with %d of %d shards missing: %w",
			c.p, missing, c.p.Shards(), ErrTooFewShards)
	}
	if c.rs == nil {
		for _, s := range shards[1:] {
			if !bytes.Equal(s, shards[0]) {
				return false, nil
			}
		}
		return true, nil
	}
	ok, err := c.rs.Verify(shards)
	if err != nil {
		panic(fmt.Sprintf("ec: verify %s shards: %v", c.p, err))
	}
	return ok, nil
}

// check validates a shard set and returns the size of its present shards
// (0 if none is) and the number missing.
func (c *Coder) check(shards [][]byte) (size, missing int, err error) {
	if len(shards) != c.p.Shards() {
		return 0, 0, fmt.Errorf("%s stripe: %d shards: %w", c.p, len(shards), ErrShardSize)
	}
	for i, s := range shards {
		switch {
		case len(s) == 0:
			missing++
		case size == 0 && len(s)%BlockBytes != 0:
			return 0, 0, fmt.Errorf("%s stripe: shard %d of %d bytes, not whole blocks: %w", c.p, i, len(s), ErrShardSize)
		case size == 0:
			size = len(s)
		case len(s) != size:
			return 0, 0, fmt.Errorf("%s stripe: shard %d of %d bytes, shard before of %d: %w", c.p, i, len(s), size, ErrShardSize)
		}
	}
	return size, missing, nil
}

func (c *Coder) tooFew(missing int) error {
	return fmt.Errorf("%s stripe: %d of %d shards missing, at most %d may be: %w",
		c.p, missing, c.p.Shards(), c.p.M, ErrTooFewShards)
}

// BlocksLostError says at which block offsets a shard asked for could not
// be rebuilt: more than M shards lacked their block there.
// Bad counts, for each such offset (in Offsets' order), the shards whose
// block there their member reported missing or corrupt, as opposed to
// shards not read at all.
type BlocksLostError struct {
	Offsets []int
	Bad     []int
	m       int
}

func (e *BlocksLostError) Error() string {
	return fmt.Sprintf("ec: blocks at shard offsets %v: more than %d shards lack them", e.Offsets, e.m)
}

func (e *BlocksLostError) Unwrap() error { return ErrTooFewShards }

// At reports whether offset o is one the error names (short) and, if so,
// whether more than M of its blocks were reported bad by their members
// (lost: no retry brings it back).
func (e *BlocksLostError) At(o int) (short, lost bool) {
	for i, off := range e.Offsets {
		if off == o {
			return true, e.Bad[i] > e.m
		}
	}
	return false, false
}

// ReconstructBlocks completes, block offset by block offset, the shards i
// of a stripe with want[i] true. shards[i] is nil (not read: every block
// of it is an erasure) or n blocks long, of which bad[i] lists the offsets
// its member lacked or held corrupt. Each byte position codes on its own,
// so a block needs K good blocks at its own offset, not K whole shards:
// two shards each with a different bad block are as good as whole ones.
// A wanted shard that was nil is allocated; its bad blocks are written
// over in place. Runs of offsets with the same erasures are rebuilt with
// one call. It fills every block it can and returns a *BlocksLostError
// (wrapping ErrTooFewShards) naming the offsets where a wanted shard's
// block could not be rebuilt, or an error wrapping ErrShardSize for a
// malformed set.
func (c *Coder) ReconstructBlocks(shards [][]byte, bad [][]uint32, n int, want []bool) error {
	ns := c.p.Shards()
	if len(shards) != ns || len(bad) != ns || len(want) != ns || n < 0 {
		return fmt.Errorf("%s stripe: %d shards, %d bad lists, %d wants: %w", c.p, len(shards), len(bad), len(want), ErrShardSize)
	}
	size := n * BlockBytes
	// keys[o]: bit i set when block o of shard i is not usable.
	keys := make([]uint64, n)
	var unread, wanted uint64
	for i, s := range shards {
		switch {
		case s == nil:
			unread |= 1 << i
			for o := range keys {
				keys[o] |= 1 << i
			}
		case len(s) != size:
			return fmt.Errorf("%s stripe: shard %d of %d bytes, want %d blocks: %w", c.p, i, len(s), n, ErrShardSize)
		}
		for _, o := range bad[i] {
			if int(o) < n {
				keys[o] |= 1 << i
			}
		}
		if want[i] {
			wanted |= 1 << i
			if s == nil {
				shards[i] = make([]byte, size)
			}
		}
	}
	lost := &BlocksLostError{m: c.p.M}
	sub, subWant := make([][]byte, ns), make([]bool, ns)
	for o := 0; o < n; {
		key, end := keys[o], o+1
		for end < n && keys[end] == key {
			end++
		}
		if key&wanted != 0 {
			missing := bits.OnesCount64(key)
			if missing > c.p.M {
				reported := bits.OnesCount64(key &^ unread) // their members said so
				for off := o; off < end; off++ {
					lost.Offsets = append(lost.Offsets, off)
					lost.Bad = append(lost.Bad, reported)
				}
			} else {
				for i := range ns {
					sub[i], subWant[i] = nil, key&(1<<i) != 0 && want[i]
					if key&(1<<i) == 0 {
						sub[i] = shards[i][o*BlockBytes : end*BlockBytes]
					}
				}
				if err := c.ReconstructSome(sub, subWant); err != nil {
					return err
				}
				for i := range ns {
					if subWant[i] {
						copy(shards[i][o*BlockBytes:end*BlockBytes], sub[i])
					}
				}
			}
		}
		o = end
	}
	if len(lost.Offsets) > 0 {
		return lost
	}
	return nil
}
