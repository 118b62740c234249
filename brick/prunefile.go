package brick

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The prune record: for each PG this brick pruned as its primary, the
// volume's count of deleted snapshots (clustermap.Volume.SnapshotsDeleted)
// it pruned at. A PG whose count in the map is higher may hold versions
// only a deleted snapshot saw (prune.go). The record is written only after
// a prune finished, so a brick that stops part way prunes again when it
// comes back; pruning twice removes nothing the second time.
//
// Format (version 1): the file DataDir/pruned holds a header line
// "plumeria-pruned 1\n", then one line "<vol> <pg> <count>\n" per PG, all
// in decimal, written to a temporary file, synced and renamed over the old
// one (then the directory is synced). A missing file records nothing.

const (
	pruneFileName    = "pruned"
	pruneFileMagic   = "plumeria-pruned"
	pruneFileVersion = 1
)

type pruneFile struct {
	path string
	mu   struct {
		sync.Mutex
		at map[pgKey]uint64
	}
}

// openPruneFile reads the record in dir (empty when there is none).
func openPruneFile(dir string) (*pruneFile, error) {
	f := &pruneFile{path: filepath.Join(dir, pruneFileName)}
	f.mu.at = map[pgKey]uint64{}
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the prune record %s: %w", f.path, err)
	}
	if f.mu.at, err = parsePruneFile(b); err != nil {
		// Losing it costs one more prune of each PG, nothing else.
		return nil, fmt.Errorf("prune record %s: %w (delete the file: the brick then prunes every PG it leads once more)", f.path, err)
	}
	return f, nil
}

func parsePruneFile(b []byte) (map[pgKey]uint64, error) {
	at := map[pgKey]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || sc.Text() != fmt.Sprintf("%s %d", pruneFileMagic, pruneFileVersion) {
		return nil, fmt.Errorf("not a prune record of version %d", pruneFileVersion)
	}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("bad line %q", sc.Text())
		}
		vol, err1 := strconv.ParseUint(f[0], 10, 64)
		pg, err2 := strconv.ParseUint(f[1], 10, 32)
		n, err3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("bad line %q: %w", sc.Text(), err)
		}
		at[pgKey{Vol: vol, PG: uint32(pg)}] = n
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		return nil, errors.New("torn: no final newline")
	}
	return at, sc.Err()
}

// at returns the count k was pruned at (0: never).
func (f *pruneFile) at(k pgKey) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.at[k]
}

// record makes count the one each PG of done was pruned at, durably, and
// forgets the volumes not in vols (deleted from the map).
func (f *pruneFile) record(done []pgKey, count uint64, vols map[uint64]bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := maps.Clone(f.mu.at)
	for _, k := range done {
		at[k] = max(at[k], count)
	}
	maps.DeleteFunc(at, func(k pgKey, _ uint64) bool { return !vols[k.Vol] })
	keys := slices.SortedFunc(maps.Keys(at), func(a, b pgKey) int {
		return cmp.Or(cmp.Compare(a.Vol, b.Vol), cmp.Compare(a.PG, b.PG))
	})
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s %d\n", pruneFileMagic, pruneFileVersion)
	for _, k := range keys {
		fmt.Fprintf(&buf, "%d %d %d\n", k.Vol, k.PG, at[k])
	}
	if err := writeFileDurable(f.path, buf.Bytes()); err != nil {
		return fmt.Errorf("prune record: %w", err)
	}
	f.mu.at = at
	return nil
}

// writeFileDurable replaces path with b: a temporary file, synced, renamed
// over it, and the directory synced.
func writeFileDurable(path string, b []byte) error {
	tmp := path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	return err
}
