package clustermap

// File versions. A volume created with FileVersions keeps, besides its
// snapshots, a version of each file every time the file system closes it,
// at no cost on the data path: a write carries a 32-bit file version f,
// and the bricks store it under a gen (the third part of a block's key,
// brick/store) that holds both the volume's generation and f:
//
//	store gen = Gen<<32 | f           a write of file version f, 1 <= f <= FileVersionMax
//	store gen = Gen<<32 | Unversioned a write without one (metadata, logs, raw vdisk writes)
//
// A reader at store gen r sees a block's entry with the greatest gen <= r.
// The live volume reads at Gen<<32 | Unversioned, a snapshot taken at
// generation g at g<<32 | Unversioned: both see every write of their
// generation, whatever its file version, and the writes of a later file
// version in one generation do not replace the entries of earlier ones
// (their keys differ). A version reader for f, optionally combined with a
// snapshot, sees the newest entry with gen <= its reader gen whose low 32
// bits are <= f. The file system promises that a block's file versions
// never decrease within one generation (and, its files' versions only
// growing, across them too), and a generation only grows, so for one
// block both halves of its gens grow in the order they were written: the
// entries a version reader accepts are a prefix of the block's entries in
// gen order (unversioned writes of earlier generations aside, which it
// skips), and it reads the last of them, which is the block as it was
// when version f was closed. Reads and writes stay
// linearizable as before: a write is still one put per block at one key,
// made under the primary's exclusive lock of the block and on every
// replica before it is acknowledged, and a read of any reader gen and file
// version picks one entry per block under the shared lock, as a function
// of the entries present; so it sees exactly the writes applied before it.
//
// A volume without FileVersions keeps today's gens: StoreGen is Gen, and
// every reader reads at Gen or at its snapshot's gen.

const (
	// FileVersionMax is the greatest file version a write may carry.
	FileVersionMax uint32 = 1<<32 - 2
	// Unversioned is the low half of the store gen of a write that
	// carries no file version (f == 0), and of every reader's gen: in one
	// generation it is newer than any versioned write.
	Unversioned uint32 = 1<<32 - 1
	// FileVersionGenMax bounds Gen of a volume with file versions: its
	// store gens shift it left by 32 bits.
	FileVersionGenMax uint64 = 1<<32 - 1
)

// StoreGen returns the gen a write of file version f (0: none) is stored
// under in v's current generation.
func (v *Volume) StoreGen(f uint32) uint64 {
	if !v.FileVersions {
		return v.Gen
	}
	if f == 0 {
		f = Unversioned
	}
	return v.Gen<<32 | uint64(f)
}

// LiveReadGen returns the store gen the live volume reads at.
func (v *Volume) LiveReadGen() uint64 { return v.readGen(v.Gen) }

// SnapshotReadGen returns the store gen the named snapshot reads at, and
// whether v has that snapshot.
func (v *Volume) SnapshotReadGen(name string) (uint64, bool) {
	g, ok := v.Snapshots[name]
	if !ok {
		return 0, false
	}
	return v.readGen(g), true
}

// SnapshotReadGens returns the store gens v's snapshots read at,
// ascending, each once.
func (v *Volume) SnapshotReadGens() []uint64 {
	gens := v.SnapshotGens()
	for i, g := range gens {
		gens[i] = v.readGen(g)
	}
	return gens
}

func (v *Volume) readGen(g uint64) uint64 {
	if !v.FileVersions {
		return g
	}
	return g<<32 | uint64(Unversioned)
}

// SplitStoreGen returns the generation and file version a store gen of v
// encodes. A volume without file versions stores every write as
// unversioned: (gen, Unversioned).
func (v *Volume) SplitStoreGen(gen uint64) (g uint64, f uint32) {
	if !v.FileVersions {
		return gen, Unversioned
	}
	return gen >> 32, uint32(gen)
}

// PruneKeepMax bounds the file versions one request to prune a range's
// versions (Brick.PruneVersions) may keep below its bound.
const PruneKeepMax = 1 << 16
