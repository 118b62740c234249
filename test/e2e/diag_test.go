package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// diagFunc explains a mismatch at byte d of extent e (for failure messages).
type diagFunc func(e *extent, d int) string

// replicaDiag returns a diagFunc that asks every brick in the newest map
// for its stored copy of the block holding the first wrong byte (live
// generation), and says whether each copy matches what the test expects.
func (c *cluster) replicaDiag(volName string) diagFunc {
	return func(e *extent, d int) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := coordclient.New(c.coordAddrs()...)
		if err != nil {
			return err.Error()
		}
		defer cl.Close()
		m, err := cl.Map(ctx, 0)
		if err != nil {
			return "map: " + err.Error()
		}
		vol := m.Volume(volName)
		if vol == nil {
			return "no volume " + volName
		}
		at := e.off + uint64(d)
		block := at / blockBytes
		bStart := block * blockBytes
		lo, hi := max(bStart, e.off), min(bStart+blockBytes, e.off+uint64(len(e.data)))
		want := e.data[lo-e.off : hi-e.off]
		pg := vol.PGOf(at)
		var out []string
		out = append(out, fmt.Sprintf("block %d (pg %d, members %v syncing %v, map epoch %d, gen %d):",
			block, pg, vol.PGs[pg].Bricks, vol.PGs[pg].Syncing, m.Epoch, vol.Gen))
		for _, b := range m.Bricks {
			conn, err := dialAsBrick(b.Addr)
			if err != nil {
				out = append(out, fmt.Sprintf("%s: %v", b.Name, err))
				continue
			}
			r, err := pb.NewBrickClient(conn).FetchBlock(ctx, &pb.FetchBlockRequest{Vol: vol.ID, Block: block, Gen: vol.Gen})
			conn.Close()
			switch {
			case err != nil:
				out = append(out, fmt.Sprintf("%s: %s", b.Name, coordclient.ErrorMessage(err)))
			case r.Tombstone:
				out = append(out, fmt.Sprintf("%s: tombstone seq %#x", b.Name, r.Seq))
			default:
				got := r.Data[lo-bStart : hi-bStart]
				what := "OTHER bytes"
				switch {
				case bytes.Equal(got, want):
					what = "expected bytes"
				case bytes.Equal(got, make([]byte, len(got))):
					what = "zeros"
				}
				out = append(out, fmt.Sprintf("%s: seq %#x, %s", b.Name, r.Seq, what))
			}
		}
		return strings.Join(out, "\n    ")
	}
}

// mapHistory reads the cluster maps a stopped coordinator committed (its
// Raft log) and returns one line per epoch at which a brick changed state,
// plus the epoch count: enough to see unexpected "down" verdicts.
func mapHistory(p *proc) []string {
	db := filepath.Join(p.data, "coordinator", "raft", "raft.db")
	st, err := raftboltdb.New(raftboltdb.Options{Path: db, BoltOptions: &bbolt.Options{ReadOnly: true, Timeout: time.Second}})
	if err != nil {
		return []string{fmt.Sprintf("map history of %s: %v", p.name, err)}
	}
	defer st.Close()
	first, _ := st.FirstIndex()
	last, _ := st.LastIndex()
	var out []string
	prev, epochs := "", 0
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := st.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		m, err := clustermap.Decode(l.Data)
		if err != nil {
			continue
		}
		epochs++
		var states []string
		for _, b := range m.Bricks {
			states = append(states, b.Name+":"+string(b.State))
		}
		if s := strings.Join(states, " "); s != prev {
			out = append(out, fmt.Sprintf("epoch %d: %s", m.Epoch, s))
			prev = s
		}
	}
	return append(out, fmt.Sprintf("(%d maps in the log of %s)", epochs, p.name))
}
