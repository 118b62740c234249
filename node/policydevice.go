package node

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// PolicyDevice is the file system's availability policies
// (filesys.PolicyDevice) over a volume and the coordinator: a policy
// becomes one of the volume's redundancy profiles (EnsureProfile at the
// coordinator), and data moves into its stripes through
// volume.Relayout.
type PolicyDevice struct {
	vol  *volume.Volume
	cc   *coordclient.Client
	name string // the volume's
}

var _ filesys.PolicyDevice = PolicyDevice{}

// NewPolicyDevice adapts volume name (vol, which the caller keeps and
// closes) and the coordinator client cc.
func NewPolicyDevice(vol *volume.Volume, cc *coordclient.Client, name string) PolicyDevice {
	return PolicyDevice{vol: vol, cc: cc, name: name}
}

// EnsureProfile admits p as a profile of the volume (idempotent). A
// profile the cluster cannot place is refused with filesys.ErrInvalid and
// the coordinator's reason.
func (d PolicyDevice) EnsureProfile(ctx context.Context, p filesys.Policy) (uint16, error) {
	if p.IsHome() {
		return 0, nil
	}
	req := &pb.EnsureProfileRequest{Volume: d.name, Profile: &pb.Profile{K: uint32(p.K), M: uint32(p.M), Level: p.Domain, Class: p.Class}}
	var resp *pb.EnsureProfileResponse
	err := d.cc.Call(ctx, func(ctx context.Context, cl pb.CoordinatorClient) error {
		var err error
		resp, err = cl.EnsureProfile(ctx, req)
		return err
	})
	switch status.Code(err) {
	case codes.OK:
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound:
		return 0, fmt.Errorf("%w: policy %s on volume %s: %s", filesys.ErrInvalid, p, d.name, coordclient.ErrorMessage(err))
	default:
		return 0, fmt.Errorf("policy %s on volume %s: %w", p, d.name, err)
	}
	if resp.Id > 0xffff {
		return 0, fmt.Errorf("policy %s on volume %s: profile id %d out of range", p, d.name, resp.Id)
	}
	return uint16(resp.Id), nil
}

// Relayout moves the live blocks of [off, off+n) into stripes of profile.
func (d PolicyDevice) Relayout(ctx context.Context, off, n uint64, profile uint16, progress func(done, total int64)) error {
	_, err := d.vol.Relayout(ctx, off, n, profile, progress)
	return deviceError(err)
}

// Layout counts the live blocks of [off, off+n) per profile id.
func (d PolicyDevice) Layout(ctx context.Context, off, n uint64) (map[uint16]int64, error) {
	m, err := d.vol.Layout(ctx, off, n)
	return m, deviceError(err)
}

// Profiles returns the volume's profiles by id as policies, id 0 its own
// replication, from the coordinator's map (the volume client's may miss
// a profile just admitted).
func (d PolicyDevice) Profiles(ctx context.Context) (map[uint16]filesys.Policy, error) {
	m, err := d.cc.Map(ctx, d.vol.Map().Epoch)
	if err != nil {
		return nil, err
	}
	v := m.Volume(d.name)
	if v == nil {
		return nil, fmt.Errorf("volume %s: %w", d.name, volume.ErrNoVolume)
	}
	out := map[uint16]filesys.Policy{0: filesys.NewPolicy(1, v.Replicas-1, v.Domain, v.Class)}
	for _, p := range v.Profiles {
		out[p.ID] = policyOf(p)
	}
	return out, nil
}

func policyOf(p clustermap.Profile) filesys.Policy {
	return filesys.NewPolicy(p.K, p.M, p.Level, p.Class)
}
