package ec

import (
	"bytes"
	"errors"
	"fmt"

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
