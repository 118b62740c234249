package coord

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// fsm is the Raft state machine: the current cluster map. Every Raft log
// entry is one whole map in clustermap's encoding (the leader serialises
// changes, so entries never conflict); an entry whose epoch is not newer
// than the current map is ignored. Snapshots are the encoded map.
type fsm struct {
	mu      sync.RWMutex
	m       *clustermap.Map
	changed chan struct{} // closed and replaced on every install
}

func newFSM() *fsm {
	return &fsm{m: &clustermap.Map{NextVolumeID: 1}, changed: make(chan struct{})}
}

// Map returns the current map. Callers must not modify it (Clone first).
func (f *fsm) Map() *clustermap.Map {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.m
}

// Changed returns a channel closed at the next install.
func (f *fsm) Changed() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.changed
}

func (f *fsm) install(m *clustermap.Map) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.Epoch <= f.m.Epoch {
		return
	}
	f.m = m
	pki.NoteRevoked(m.Epoch, m.RevokedNames())
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fsm) Apply(l *raft.Log) any {
	m, err := clustermap.Decode(l.Data)
	if err != nil {
		// A committed entry that does not decode is a bug or disk damage;
		// refusing it keeps the previous map and reports the error.
		return fmt.Errorf("raft entry %d: %w", l.Index, err)
	}
	f.install(m)
	return nil
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot(clustermap.Encode(f.Map())), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 64<<20))
	if err != nil {
		return fmt.Errorf("restore map snapshot: %w", err)
	}
	m, err := clustermap.Decode(b)
	if err != nil {
		return fmt.Errorf("restore map snapshot: %w", err)
	}
	f.mu.Lock()
	f.m = m
	pki.NoteRevoked(m.Epoch, m.RevokedNames())
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
