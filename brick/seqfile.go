package brick

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The seq reservation: a brick records on disk, before it uses any seq
// above it, a seq up to which it may have assigned seqs (repl.Core.NextSeq
// asks for a new reservation every repl.SeqReserve seqs and at the first
// seq of every map epoch it writes under). A restarted brick counts on past
// it, so it never hands out a seq it handed out before, even one whose
// block it never stored (its own apply runs beside the replication, and a
// crash or a full disk may lose it while the backups keep it).
//
// Format (version 1): the file DataDir/seq-reserved holds one line,
// "plumeria-seq-reserved 1 <seq in decimal>\n", written to a temporary file,
// synced and renamed over the old one (then the directory is synced). A
// missing file means none was made (a new brick, or one made by an older
// version: repl.NewCore then counts on from its highest stored seq by
// repl.RestartSeqGap, as those did).

const (
	seqFileName    = "seq-reserved"
	seqFileMagic   = "plumeria-seq-reserved"
	seqFileVersion = 1
)

type seqFile struct {
	mu      sync.Mutex
	path    string
	durable uint64
}

// openSeqFile reads the reservation in dir (0 when there is none).
func openSeqFile(dir string) (*seqFile, error) {
	f := &seqFile{path: filepath.Join(dir, seqFileName)}
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the seq reservation %s: %w", f.path, err)
	}
	if f.durable, err = parseSeqFile(b); err != nil {
		return nil, fmt.Errorf("seq reservation %s: %w (the brick cannot know which seqs it handed out; restore the file or rebuild the brick: `plumeria brick remove`, then start it on an empty directory)", f.path, err)
	}
	return f, nil
}

func parseSeqFile(b []byte) (uint64, error) {
	fields := strings.Fields(string(b))
	if len(fields) != 3 || fields[0] != seqFileMagic || !strings.HasSuffix(string(b), "\n") {
		return 0, errors.New("not a seq reservation")
	}
	v, err := strconv.Atoi(fields[1])
	if err != nil || v != seqFileVersion {
		return 0, fmt.Errorf("format version %q, this build reads version %d", fields[1], seqFileVersion)
	}
	seq, err := strconv.ParseUint(fields[2], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad seq %q", fields[2])
	}
	return seq, nil
}

// ensure makes a reservation of at least r durable.
func (f *seqFile) ensure(r uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.durable >= r {
		return nil
	}
	tmp := f.path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("seq reservation: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s %d %d\n", seqFileMagic, seqFileVersion, r)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(f.path))
	}
	if err != nil {
		return fmt.Errorf("seq reservation: %w", err)
	}
	f.durable = r
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
