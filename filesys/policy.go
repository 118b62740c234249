package filesys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/plumeria-fs/plumeria/filesys/layout"
	"github.com/plumeria-fs/plumeria/internal/limits"
)

// Policy is a directory's availability policy: how the data of the files
// below it is kept (issue J). Copies=N keeps N whole copies (a mirror
// stripe, K=1 and M=N-1); otherwise K data and M parity shards of each
// chunk (an erasure-coded stripe). Domain is the failure-domain level the
// copies or shards are spread over (host, rack, site; "" is host) and
// Class the storage class of the bricks holding them ("" any). A
// directory's policy is the extended attribute PolicyXattr, inherited by
// everything below it that has none of its own; where no directory up to
// the root has one, data stays in the volume's own replication (the
// "home": the zero Policy).
//
// The fields are kept normalised (ParsePolicy and normalise): Copies is
// M+1 when K is 1 and 0 otherwise, and Domain is never "host", so that
// == compares policies.
type Policy struct {
	Copies        int
	K, M          int
	Domain, Class string
}

// PolicyXattr holds a directory's availability policy (Policy.String).
const PolicyXattr = "user.plumeria.policy"

// Failure-domain levels a policy may name.
const (
	DomainHost = "host"
	DomainRack = "rack"
	DomainSite = "site"
)

// policyBytesMax bounds a policy's text.
const policyBytesMax = 256

// IsHome reports whether p is the zero Policy: the volume's own
// replication, no profile of its own.
func (p Policy) IsHome() bool { return p == Policy{} }

// String renders p as ParsePolicy reads it: "copies=3 domain=rack",
// "ec=8+3 class=ssd" (domain host and class any left out); "home" for
// the zero Policy.
func (p Policy) String() string {
	if p.IsHome() {
		return "home"
	}
	s := fmt.Sprintf("ec=%d+%d", p.K, p.M)
	if p.K == 1 {
		s = fmt.Sprintf("copies=%d", p.M+1)
	}
	if p.Domain != "" && p.Domain != DomainHost {
		s += " domain=" + p.Domain
	}
	if p.Class != "" {
		s += " class=" + p.Class
	}
	return s
}

// NewPolicy returns the policy of k data and m parity shards (k=1:
// copies=m+1) over domain and class, normalised; it checks no bounds
// (ParsePolicy does).
func NewPolicy(k, m int, domain, class string) Policy {
	return Policy{K: k, M: m, Domain: domain, Class: class}.normalise()
}

// normalise sets Copies from K and M and drops a "host" domain.
func (p Policy) normalise() Policy {
	p.Copies = 0
	if p.K == 1 {
		p.Copies = p.M + 1
	}
	if p.Domain == DomainHost {
		p.Domain = ""
	}
	return p
}

// ParsePolicy reads a policy: space-separated copies=N or ec=K+M (one of
// them), and optionally domain=host|rack|site and class=NAME, each at most
// once. Bounds: K 1..limits.DataShardsMax, M 0..limits.ParityShardsMax,
// K+M at most limits.ShardsMax (copies=N is K=1, M=N-1); a class is 1 to
// limits.ClassBytesMax bytes of letters, digits, '_', and '.' or '-' after
// the first. Refusals wrap ErrInvalid and say why.
func ParsePolicy(s string) (Policy, error) {
	if len(s) > policyBytesMax {
		return Policy{}, fmt.Errorf("%w: policy of %d bytes (at most %d)", ErrInvalid, len(s), policyBytesMax)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return Policy{}, fmt.Errorf("%w: empty policy: give copies=N or ec=K+M, and optionally domain=host|rack|site and class=NAME", ErrInvalid)
	}
	var p Policy
	seen := map[string]bool{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" {
			return Policy{}, fmt.Errorf("%w: policy %q: %q is not KEY=VALUE", ErrInvalid, s, f)
		}
		if seen[k] {
			return Policy{}, fmt.Errorf("%w: policy %q: %s given twice", ErrInvalid, s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "copies":
			var n int
			n, err = policyNumber(v)
			p.K, p.M = 1, n-1
			if err == nil && n < 1 {
				err = errors.New("at least 1")
			}
		case "ec":
			a, b, ok := strings.Cut(v, "+")
			if !ok {
				err = errors.New("give K+M, like 4+2")
				break
			}
			if p.K, err = policyNumber(a); err == nil {
				p.M, err = policyNumber(b)
			}
		case "domain":
			switch v {
			case DomainHost, DomainRack, DomainSite:
				p.Domain = v
			default:
				err = errors.New("use host, rack or site")
			}
		case "class":
			p.Class, err = v, checkClass(v)
		default:
			return Policy{}, fmt.Errorf("%w: policy %q: unknown key %q (copies, ec, domain, class)", ErrInvalid, s, k)
		}
		if err != nil {
			return Policy{}, fmt.Errorf("%w: policy %q: %s: %v", ErrInvalid, s, f, err)
		}
	}
	switch {
	case seen["copies"] && seen["ec"]:
		return Policy{}, fmt.Errorf("%w: policy %q: give copies=N or ec=K+M, not both", ErrInvalid, s)
	case !seen["copies"] && !seen["ec"]:
		return Policy{}, fmt.Errorf("%w: policy %q: give copies=N or ec=K+M", ErrInvalid, s)
	}
	if err := p.validate(); err != nil {
		return Policy{}, fmt.Errorf("%w: policy %q: %v", ErrInvalid, s, err)
	}
	return p.normalise(), nil
}

// validate checks K and M against the limits (brick/ec and
// clustermap.Profile.Validate hold the same bounds).
func (p Policy) validate() error {
	switch {
	case p.K < 1 || p.K > limits.DataShardsMax:
		return fmt.Errorf("k=%d: must be 1..%d", p.K, limits.DataShardsMax)
	case p.M < 0 || p.M > limits.ParityShardsMax:
		if p.K == 1 {
			return fmt.Errorf("copies=%d: must be 1..%d", p.M+1, limits.ParityShardsMax+1)
		}
		return fmt.Errorf("m=%d: must be 0..%d", p.M, limits.ParityShardsMax)
	case p.K+p.M > limits.ShardsMax:
		return fmt.Errorf("k+m=%d: must be at most %d", p.K+p.M, limits.ShardsMax)
	}
	return nil
}

// policyNumber reads 1 to 3 decimal digits (no sign).
func policyNumber(v string) (int, error) {
	if len(v) == 0 || len(v) > 3 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a number", v)
	}
	return strconv.Atoi(v)
}

// checkClass checks a storage class name as clustermap.ValidClass does.
func checkClass(s string) error {
	if len(s) > limits.ClassBytesMax {
		return fmt.Errorf("storage class of %d bytes (at most %d)", len(s), limits.ClassBytesMax)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			(i > 0 && (c == '.' || c == '-'))
		if !ok {
			return fmt.Errorf("storage class %q: character %q not allowed (letters, digits, '_', '.', '-')", s, c)
		}
	}
	return nil
}

// stricter reports whether p ranks above q for a file with hard links in
// directories of different policies: the one that survives more failures
// (M), then over wider domains, then the one with more data shards (less
// overhead), then by text, so that every pass picks the same. The home
// (zero Policy) ranks below every explicit policy.
func (p Policy) stricter(q Policy) bool {
	if p.IsHome() != q.IsHome() {
		return q.IsHome()
	}
	if p.M != q.M {
		return p.M > q.M
	}
	if dp, dq := domainRank(p.Domain), domainRank(q.Domain); dp != dq {
		return dp > dq
	}
	if p.K != q.K {
		return p.K > q.K
	}
	return p.String() < q.String()
}

func domainRank(d string) int {
	switch d {
	case DomainRack:
		return 1
	case DomainSite:
		return 2
	}
	return 0
}

// PolicyDevice is what the mover and the layout attribute need of the
// volume (node implements it over the volume and the coordinator).
// Profile ids: 0 is the volume's own replication ("home"), others are
// the volume's redundancy profiles.
type PolicyDevice interface {
	// EnsureProfile returns the id of the volume's profile for p,
	// admitting it if the volume has none yet: 0 when p is the volume's
	// own replication. A profile the cluster cannot place (too few
	// bricks, domains or bricks of the class) is refused with the reason.
	EnsureProfile(ctx context.Context, p Policy) (uint16, error)
	// Relayout moves the live blocks of [off, off+n) into stripes of
	// profile (not 0); reads and writes go on meanwhile. progress (may be
	// nil) gets the chunks done and their total.
	Relayout(ctx context.Context, off, n uint64, profile uint16, progress func(done, total int64)) error
	// Layout counts the live 4 KiB blocks of [off, off+n) per profile id.
	Layout(ctx context.Context, off, n uint64) (map[uint16]int64, error)
	// Profiles returns the volume's profiles by id, id 0 its own
	// replication (as a Policy: copies, domain and class of the volume).
	Profiles(ctx context.Context) (map[uint16]Policy, error)
}

// ownPolicy returns directory ino's own availability policy; ok is false
// when it has none (or one that does not parse, which Setxattr refuses
// but an older build may have written: logged, and treated as none).
func (fs *FS) ownPolicy(ctx context.Context, ino uint64) (p Policy, ok bool, err error) {
	v, err := fs.Getxattr(ctx, ino, PolicyXattr)
	if errors.Is(err, ErrNoAttr) {
		return Policy{}, false, nil
	}
	if err != nil {
		return Policy{}, false, err
	}
	p, err = ParsePolicy(string(v))
	if err != nil {
		fs.log.Warn("a directory's availability policy does not parse: its parent's applies", "ino", ino, "err", err)
		return Policy{}, false, nil
	}
	return p, true, nil
}

// PolicyAt returns the availability policy in force in directory dino
// and the directory it comes from (0: none up to the root has one, the
// volume's own replication applies). It walks up the parents.
func (fs *FS) PolicyAt(ctx context.Context, dino uint64) (Policy, uint64, error) {
	d := dino
	for depth := 0; depth < 1<<16; depth++ {
		p, ok, err := fs.ownPolicy(ctx, d)
		if err != nil || ok {
			return p, d, err
		}
		if d == RootIno {
			return Policy{}, 0, nil
		}
		if d, err = fs.parentOf(ctx, d); err != nil {
			return Policy{}, 0, err
		}
	}
	return Policy{}, 0, fmt.Errorf("%w: directory tree deeper than 65536 above %d (a cycle? run plumeria fsck)", ErrIO, dino)
}

// parentOf returns directory d's parent.
func (fs *FS) parentOf(ctx context.Context, d uint64) (uint64, error) {
	h, err := fs.acquire(ctx, r(inodeLock(d)))
	if err != nil {
		return 0, err
	}
	defer h.release()
	in, err := fs.newTx(ctx).inode(d)
	if err != nil {
		return 0, err
	}
	if !isDir(in) || in.Parent == 0 {
		return 0, fmt.Errorf("%w: inode %d is not a directory with a parent", ErrIO, d)
	}
	return in.Parent, nil
}

// admitPolicy checks a value for PolicyXattr on ino: it parses, ino is a
// directory, and the cluster can place the policy's profile (it is
// admitted now, EnsureProfile, so that a refusal reaches whoever sets it
// as ErrInvalid with the reason). It returns the policy normalised.
func (fs *FS) admitPolicy(ctx context.Context, ino uint64, value []byte) (Policy, error) {
	p, err := ParsePolicy(string(value))
	if err != nil {
		return Policy{}, err
	}
	kind, err := fs.inodeType(ctx, ino)
	if err != nil {
		return Policy{}, err
	}
	if kind != typeDir {
		return Policy{}, fmt.Errorf("%w: %s on inode %d: an availability policy holds for a directory tree", ErrInvalid, PolicyXattr, ino)
	}
	if fs.cfg.Policies != nil {
		if _, err := fs.cfg.Policies.EnsureProfile(ctx, p); err != nil {
			return Policy{}, err
		}
	}
	return p, nil
}

// LayoutXattr is the extended attribute through which a mount tells where
// data is (`plumeria policy show`): reading it on a regular file or a
// directory returns LayoutInfo as JSON. It is never listed and cannot be
// set. On a directory it walks the tree below, O(files) with one
// PolicyDevice.Layout per file, up to layoutFilesMax files (Truncated
// says it stopped there).
const LayoutXattr = "user.plumeria.layout"

// layoutFilesMax bounds the files one read of LayoutXattr looks at.
const layoutFilesMax = 10000

// LayoutInfo is LayoutXattr's value. Byte counts are of whole live 4 KiB
// blocks of the files' extents; data inline in inodes is not counted
// (InlineFiles: nothing to move).
type LayoutInfo struct {
	Home        string           `json:"home"`             // the volume's own replication, as a policy
	Policy      string           `json:"policy,omitempty"` // a directory: the policy in force in it
	Files       int              `json:"files"`
	InlineFiles int              `json:"inline_files"`
	TotalBytes  int64            `json:"total_bytes"`
	Layouts     map[string]int64 `json:"layouts"` // bytes by profile: "home" or Policy.String()
	// CompliantBytes, for a directory, counts the bytes where the policy
	// each file is under wants them (files in subdirectories with
	// policies of their own by those). For a file the reader knows the
	// policy (the nearest directory's): Layouts[name] is its answer.
	CompliantBytes *int64 `json:"compliant_bytes,omitempty"`
	Truncated      bool   `json:"truncated,omitempty"`
}

// ProfileName is how LayoutInfo names a profile: "home" for the volume's
// own replication (id 0), else the policy's text.
func ProfileName(id uint16, profiles map[uint16]Policy) string {
	if id == 0 {
		return "home"
	}
	if p, ok := profiles[id]; ok {
		return p.String()
	}
	return fmt.Sprintf("profile-%d", id)
}

// TargetName is the LayoutInfo.Layouts key where data under p complies:
// "home" for the zero Policy or one equal to the volume's own
// replication (home, as LayoutInfo.Home reads), else p.String().
func TargetName(p Policy, home Policy) string {
	if p.IsHome() || p == home {
		return "home"
	}
	return p.String()
}

func (fs *FS) layoutXattr(ctx context.Context, ino uint64) ([]byte, error) {
	pd := fs.cfg.Policies
	if pd == nil {
		return nil, fmt.Errorf("%w: %s (the volume has no availability policies here)", ErrNoAttr, LayoutXattr)
	}
	kind, err := fs.inodeType(ctx, ino)
	if err != nil {
		return nil, err
	}
	profiles, err := pd.Profiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: read the volume's profiles: %v", ErrIO, err)
	}
	info := LayoutInfo{Home: profiles[0].String(), Layouts: map[string]int64{}}
	var files map[uint64]Policy
	switch kind {
	case typeReg:
		files = map[uint64]Policy{ino: {}}
	case typeDir:
		p, _, err := fs.PolicyAt(ctx, ino)
		if err != nil {
			return nil, err
		}
		info.Policy = TargetName(p, profiles[0])
		if files, info.Truncated, err = fs.policyWalk(ctx, ino, p, layoutFilesMax); err != nil {
			return nil, err
		}
		info.CompliantBytes = new(int64)
	default:
		return nil, fmt.Errorf("%w: %s on inode %d: neither a file nor a directory", ErrNoAttr, LayoutXattr, ino)
	}
	for f, p := range files {
		ff, ok, err := fs.fileFacts(ctx, f)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		info.Files++
		if ff.inline || ff.size == 0 {
			info.InlineFiles++
			continue
		}
		lay, err := pd.Layout(ctx, layout.ExtentAddr(f), (ff.size+layout.BlockBytes-1)/layout.BlockBytes*layout.BlockBytes)
		if err != nil {
			return nil, fmt.Errorf("%w: read the layout of inode %d: %v", ErrIO, f, err)
		}
		want := TargetName(p, profiles[0])
		for id, blocks := range lay {
			name := ProfileName(id, profiles)
			info.Layouts[name] += blocks * layout.BlockBytes
			info.TotalBytes += blocks * layout.BlockBytes
			if info.CompliantBytes != nil && name == want {
				*info.CompliantBytes += blocks * layout.BlockBytes
			}
		}
	}
	return json.Marshal(info)
}
