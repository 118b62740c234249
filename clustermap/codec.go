package clustermap

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Encoding of a map, used in Raft log entries, Raft snapshots, and on the
// wire (map_json fields):
//
//	{"format": 1, "map": { ...Map fields as tagged in map.go... }}
//
// Format 1 is the only format. Adding an optional field keeps format 1;
// anything a format-1 reader would misread needs format 2. Optional
// fields added since: volumes' snapshot_times, snapshots_deleted and
// snapshot_schedule (session 15); a reader that ignores them reads the
// volume's data right (it only neither prunes nor runs schedules).
// Volumes' file_versions (file-version gens): a reader that ignores it would
// read and write such a volume at the wrong gens, but only bricks and
// clients of this build or later are given volumes that have it (it is
// set at creation only, never on an existing volume).
// The map's tokens and revoked (session 19, security.go): a reader that
// ignores them accepts no token it should refuse (it cannot issue) but
// would not refuse a revoked node: run every member at this build or later
// before revoking.
const mapFormat = 1

// mapBytesMax bounds an encoded map a decoder accepts.
const mapBytesMax = 64 << 20

type envelope struct {
	Format int  `json:"format"`
	Map    *Map `json:"map"`
}

// ErrBadMap is returned (wrapped) by Decode for bytes that are not a valid map.
var ErrBadMap = errors.New("clustermap: bad encoded map")

// Encode returns the map's encoding.
func Encode(m *Map) []byte {
	b, err := json.Marshal(envelope{Format: mapFormat, Map: m})
	if err != nil {
		panic(fmt.Sprintf("clustermap: encode: %v", err)) // only plain data types: cannot fail
	}
	return b
}

// Decode parses and validates an encoded map.
func Decode(b []byte) (*Map, error) {
	if len(b) > mapBytesMax {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrBadMap, len(b), mapBytesMax)
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMap, err)
	}
	if e.Format != mapFormat {
		return nil, fmt.Errorf("%w: format %d, this build reads %d", ErrBadMap, e.Format, mapFormat)
	}
	if e.Map == nil {
		return nil, fmt.Errorf("%w: no map", ErrBadMap)
	}
	if err := e.Map.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMap, err)
	}
	return e.Map, nil
}
