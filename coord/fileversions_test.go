package coord

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// TestCreateVolumeFileVersions: file_versions reaches the volume in the
// map and shows in status --json; a volume created without it has none.
func TestCreateVolumeFileVersions(t *testing.T) {
	_, cl := startOne(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.RegisterBrick(ctx, &pb.RegisterBrickRequest{Name: "b1", Addr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pb.CreateVolumeRequest{
		{Name: "fv", Replicas: 1, Pgs: 2, FileVersions: true},
		{Name: "plain", Replicas: 1, Pgs: 2},
	} {
		if _, err := cl.CreateVolume(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cl.GetMap(ctx, &pb.GetMapRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := clustermap.Decode(resp.MapJson)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Volume("fv").FileVersions || m.Volume("plain").FileVersions {
		t.Fatalf("file versions in the map: fv %v, plain %v; want true, false", m.Volume("fv").FileVersions, m.Volume("plain").FileVersions)
	}
	st, err := cl.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Volumes []map[string]any `json:"volumes"`
	}
	if err := json.Unmarshal(st.StatusJson, &s); err != nil {
		t.Fatal(err)
	}
	for _, v := range s.Volumes {
		fv, has := v["file_versions"]
		if want := v["name"] == "fv"; has != want || has && fv != true {
			t.Errorf("status of volume %v: file_versions %v (present %v), want present %v", v["name"], fv, has, want)
		}
	}
}
