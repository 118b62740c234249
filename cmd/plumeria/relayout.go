package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/brick/ec"
	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

// vdiskRelayoutCmd moves a byte range of a volume into stripes of a
// profile (operator and test command; file systems use policies).
func vdiskRelayoutCmd() *cobra.Command {
	var vol, offset, length, profile, domain, class string
	c := &cobra.Command{
		Use:   "relayout --volume NAME --offset N --length N --profile K+M|copies=N [--domain host|rack|site] [--class C]",
		Short: "Move the data of a byte range into erasure-coded (or mirrored) stripes",
		Long: `relayout admits the profile on the volume (its stripe groups are placed on
bricks of the class, distinct at the domain level) and has the primary of every
chunk in the range code the chunk's live blocks into a stripe and replace them by
references to it. Reads and writes go on meanwhile and see the same bytes; data
written afterwards lands replicated again (run relayout again, or use a policy).
A profile equal to the volume's own replication (e.g. copies=3 on a volume of 3
replicas) moves coded blocks back home.`,
		Example: "  plumeria vdisk relayout --coord 127.0.0.1:7001 --volume vol1 --offset 0 --length 1GiB --profile 4+2 --domain rack",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&offset, "offset", "0", "byte offset")
	c.Flags().StringVar(&length, "length", "", "number of bytes")
	c.Flags().StringVar(&profile, "profile", "", "K+M (e.g. 4+2: any 2 of 6 bricks may be lost) or copies=N")
	c.Flags().StringVar(&domain, "domain", "host", "failure-domain level at which a stripe's bricks differ: host, rack or site")
	c.Flags().StringVar(&class, "class", "", "storage class of the stripes' bricks (default: any)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		off, err := parseUint(offset)
		if err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
		n, err := parseUint(length)
		if err != nil {
			return fmt.Errorf("--length: %w", err)
		}
		p, err := ec.ParseProfile(profile)
		if err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		if err := clustermap.ValidDomainLevel(domain); err != nil {
			return fmt.Errorf("--domain: %w", err)
		}
		if class != "" {
			if err := clustermap.ValidClass(class); err != nil {
				return fmt.Errorf("--class: %w", err)
			}
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var id uint32
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			r, err := c.EnsureProfile(ctx, &pb.EnsureProfileRequest{Volume: vol,
				Profile: &pb.Profile{K: uint32(p.K), M: uint32(p.M), Level: domain, Class: class}})
			if err == nil {
				id = r.Id
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("relayout %s: profile %s: %w", vol, p, err)
		}
		home := id == 0 // the volume's own replication: coded blocks move back home
		v, err := volume.Open(cmd.Context(), cl, vol, volume.Options{})
		if err != nil {
			return err
		}
		defer v.Close()
		var bar *progressbar.ProgressBar
		st, err := v.Relayout(cmd.Context(), off, n, uint16(id), func(done, total int64) {
			if bar == nil {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetDescription("relayout "+vol+" to "+p.String()+" (chunks)"),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			bar.Set64(done)
		})
		if err != nil {
			return fmt.Errorf("relayout %s: %w", vol, err)
		}
		ratio := ""
		if st.Swapped > 0 {
			ratio = fmt.Sprintf(" (%.2fx the data)", float64(st.StripeBytes)/float64(st.Swapped*ec.BlockBytes))
		}
		if home {
			fmt.Printf("relayout %s: %s moved back to the volume's own replication from stripes in %d of %d chunks; %d blocks changed meanwhile\n",
				vol, humanBytes(st.Swapped*ec.BlockBytes), st.Coded, st.Chunks, st.Changed)
			return nil
		}
		fmt.Printf("relayout %s: %d of %d chunks coded to %s, %s moved, %s of stripes stored%s; %d blocks changed meanwhile and stay replicated\n",
			vol, st.Coded, st.Chunks, p, humanBytes(st.Swapped*ec.BlockBytes), humanBytes(st.StripeBytes), ratio, st.Changed)
		return nil
	}
	return c
}

// vdiskLayoutCmd shows where a byte range's data is: home replication or
// the stripes of which profile.
func vdiskLayoutCmd() *cobra.Command {
	var vol, offset, length string
	c := &cobra.Command{
		Use:   "layout --volume NAME --offset N --length N",
		Short: "Show how much of a byte range is replicated and how much is in stripes, by profile",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&offset, "offset", "0", "byte offset")
	c.Flags().StringVar(&length, "length", "", "number of bytes")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		off, err := parseUint(offset)
		if err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
		n, err := parseUint(length)
		if err != nil {
			return fmt.Errorf("--length: %w", err)
		}
		v, done, err := openVolume(cmd.Context(), connect, vol, "")
		if err != nil {
			return err
		}
		defer done()
		counts, err := v.Layout(cmd.Context(), off, n)
		if err != nil {
			return fmt.Errorf("layout %s: %w", vol, err)
		}
		mv := v.Map().Volume(vol)
		var parts []string
		for _, id := range slices.Sorted(maps.Keys(counts)) {
			name := fmt.Sprintf("copies=%d (home)", mv.Replicas)
			if p := mv.Profile(id); id != 0 && p != nil {
				name = p.String()
			} else if id != 0 {
				name = fmt.Sprintf("profile %d", id)
			}
			parts = append(parts, fmt.Sprintf("%s: %s", name, humanBytes(counts[id]*ec.BlockBytes)))
		}
		if len(parts) == 0 {
			parts = []string{"no data"}
		}
		fmt.Printf("layout %s [%d, +%d): %s\n", vol, off, n, strings.Join(parts, ", "))
		return nil
	}
	return c
}
