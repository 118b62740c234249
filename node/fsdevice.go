package node

import (
	"context"
	"errors"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/volume"
)

// FSDevice is a volume as the file system's Device (filesys.Device): its
// kinds of write become volume writes with volume.Reserved and
// volume.Versioned contexts, and the volume's fencing and lack of space
// become filesys.ErrDeviceFenced and filesys.ErrNoSpace. Mounts, format,
// fsck and recovery all reach the volume through it.
type FSDevice struct{ vol *volume.Volume }

var (
	_ filesys.Device        = FSDevice{}
	_ filesys.VersionDevice = FSDevice{}
	_ filesys.VersionPruner = FSDevice{}
)

// NewFSDevice adapts vol, which the caller keeps and closes.
func NewFSDevice(vol *volume.Volume) FSDevice { return FSDevice{vol: vol} }

// ReadAt reads p at off.
func (d FSDevice) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return deviceError(d.vol.ReadAt(ctx, p, off))
}

// WriteData writes p at off as a plain volume write: a brick refuses it
// once only its metadata reserve is left.
func (d FSDevice) WriteData(ctx context.Context, p []byte, off uint64) error {
	return deviceError(d.vol.WriteAt(ctx, p, off))
}

// WriteMeta writes p at off as metadata (volume.Reserved): it may use the
// space each brick keeps back for metadata.
func (d FSDevice) WriteMeta(ctx context.Context, p []byte, off uint64) error {
	return deviceError(d.vol.WriteAt(volume.Reserved(ctx), p, off))
}

// WriteMetaBlocks writes whole metadata blocks at off as metadata and
// versioned (volume.Versioned at layout.VersionStart): a brick keeps a
// stored block whose version is not below the one written.
func (d FSDevice) WriteMetaBlocks(ctx context.Context, p []byte, off uint64) error {
	return deviceError(d.vol.WriteAt(volume.Versioned(volume.Reserved(ctx), layout.VersionStart), p, off))
}

// Decommit makes [off, off+n) read as zeros.
func (d FSDevice) Decommit(ctx context.Context, off, n uint64) error {
	return deviceError(d.vol.Decommit(ctx, off, n))
}

// KeepsVersions reports whether the volume keeps file versions
// (clustermap.Volume.FileVersions, fixed when it is created).
func (d FSDevice) KeepsVersions() bool { return d.vol.FileVersions() }

// WriteDataVersion writes file bytes at off as file version fver.
func (d FSDevice) WriteDataVersion(ctx context.Context, p []byte, off uint64, fver uint32) error {
	return deviceError(d.vol.WriteAtVersion(ctx, p, off, fver))
}

// ReadAtVersion reads p at off as of file version fver.
func (d FSDevice) ReadAtVersion(ctx context.Context, p []byte, off uint64, fver uint32) error {
	return deviceError(d.vol.ReadAtVersion(ctx, p, off, fver))
}

// DecommitVersion makes [off, off+n) read as zeros from file version fver
// on; lower versions keep their bytes.
func (d FSDevice) DecommitVersion(ctx context.Context, off, n uint64, fver uint32) error {
	return deviceError(d.vol.DecommitVersion(ctx, off, n, fver))
}

// BlockVersions lists the file versions at which the block at off holds
// bytes, ascending, each once.
func (d FSDevice) BlockVersions(ctx context.Context, off uint64) ([]uint32, error) {
	bvs, err := d.vol.BlockVersions(ctx, off)
	if err != nil {
		return nil, deviceError(err)
	}
	var out []uint32
	for _, b := range bvs {
		if b.Tombstone || b.FileVersion == 0 || b.FileVersion == clustermap.Unversioned {
			continue
		}
		if n := len(out); n > 0 && out[n-1] >= b.FileVersion {
			continue // the same version again, in a later generation
		}
		out = append(out, b.FileVersion)
	}
	return out, nil
}

// PruneVersions drops, in [off, off+n), the block entries of file
// versions below below that neither the live volume, a snapshot nor a
// version in keep reads (the version cleaner, filesys/cleaner.go).
func (d FSDevice) PruneVersions(ctx context.Context, off, n uint64, keep []uint32, below uint32) error {
	_, err := d.vol.PruneVersions(ctx, off, n, keep, below)
	return deviceError(err)
}

// deviceError maps the volume's errors the file system acts on to its own
// sentinels. The result reads as the volume's error, and errors.Is finds
// both the filesys sentinel and the volume's.
func deviceError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, volume.ErrFenced):
		return &fsError{sentinel: filesys.ErrDeviceFenced, err: err}
	case errors.Is(err, volume.ErrNoSpace):
		return &fsError{sentinel: filesys.ErrNoSpace, err: err}
	}
	return err
}

// fsError is a volume error wrapped in a filesys sentinel, with the
// volume's text.
type fsError struct{ sentinel, err error }

func (e *fsError) Error() string   { return e.err.Error() }
func (e *fsError) Unwrap() []error { return []error{e.sentinel, e.err} }
