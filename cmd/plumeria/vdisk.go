package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/volume"
)

const vdiskIOBytes = 4 << 20

func vdiskCmd() *cobra.Command {
	c := &cobra.Command{Use: "vdisk", Short: "Read, write, fence and snapshot virtual disks (operator and test commands)"}
	c.AddCommand(vdiskWriteCmd(), vdiskReadCmd(), vdiskFenceCmd(), vdiskSnapshotCmd(), vdiskSnapshotDeleteCmd(), vdiskDecommitCmd(), vdiskVerifyCmd(), vdiskRelayoutCmd(), vdiskLayoutCmd())
	return c
}

func vdiskWriteCmd() *cobra.Command {
	var vol, file, writer, offset string
	c := &cobra.Command{
		Use:     "write --volume NAME --offset N [--file F]",
		Short:   "Write a file (default stdin) into a volume at an offset",
		Example: "  head -c 1M /dev/urandom | plumeria vdisk write --coord 127.0.0.1:7001 --volume vol1 --offset 1099511627776",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&offset, "offset", "0", "byte offset (units allowed: 1GiB)")
	c.Flags().StringVar(&file, "file", "", "input file (default stdin)")
	c.Flags().StringVar(&writer, "writer", "", "writer id for fencing (default random)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		off, err := parseUint(offset)
		if err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
		in := io.Reader(os.Stdin)
		if file != "" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		v, done, err := openVolume(cmd.Context(), connect, vol, writer)
		if err != nil {
			return err
		}
		defer done()
		buf := make([]byte, vdiskIOBytes)
		var total uint64
		for {
			n, rerr := io.ReadFull(in, buf)
			if n > 0 {
				if err := v.WriteAt(cmd.Context(), buf[:n], off+total); err != nil {
					return fmt.Errorf("write at %d: %w", off+total, err)
				}
				total += uint64(n)
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				break
			}
			if rerr != nil {
				return rerr
			}
		}
		fmt.Fprintf(os.Stderr, "wrote %d bytes at %d\n", total, off)
		return nil
	}
	return c
}

func openVolume(ctx context.Context, connect func() (*coordclient.Client, error), name, writer string) (*volume.Volume, func(), error) {
	if name == "" {
		return nil, nil, fmt.Errorf("--volume is required")
	}
	cl, err := connect()
	if err != nil {
		return nil, nil, err
	}
	v, err := volume.Open(ctx, cl, name, volume.Options{Writer: writer})
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return v, func() { v.Close(); cl.Close() }, nil
}

func vdiskReadCmd() *cobra.Command {
	var vol, snap, offset, length string
	c := &cobra.Command{
		Use:     "read --volume NAME --offset N --length N [--snapshot S]",
		Short:   "Read bytes of a volume (or a snapshot) to stdout",
		Example: "  plumeria vdisk read --coord 127.0.0.1:7001 --volume vol1 --offset 0 --length 4096 | xxd | head",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&offset, "offset", "0", "byte offset")
	c.Flags().StringVar(&length, "length", "", "number of bytes")
	c.Flags().StringVar(&snap, "snapshot", "", "read this snapshot instead of the live volume")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		off, err := parseUint(offset)
		if err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
		n, err := parseUint(length)
		if err != nil {
			return fmt.Errorf("--length: %w", err)
		}
		if n > 0 && off+n-1 < off {
			return fmt.Errorf("--offset %d plus --length %d passes the end of the 2^64-byte volume", off, n)
		}
		v, done, err := openVolume(cmd.Context(), connect, vol, "")
		if err != nil {
			return err
		}
		defer done()
		w := bufio.NewWriterSize(os.Stdout, vdiskIOBytes)
		defer w.Flush()
		buf := make([]byte, vdiskIOBytes)
		for pos := uint64(0); pos < n; {
			k := min(n-pos, vdiskIOBytes)
			if err := v.ReadSnapshotAt(cmd.Context(), snap, buf[:k], off+pos); err != nil {
				return fmt.Errorf("read at %d: %w", off+pos, err)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			pos += k
		}
		return nil
	}
	return c
}

func vdiskDecommitCmd() *cobra.Command {
	var vol, offset, length, writer string
	c := &cobra.Command{
		Use:   "decommit --volume NAME --offset N --length N",
		Short: "Free a byte range of a volume (it then reads as zeros; snapshots keep theirs)",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&offset, "offset", "0", "byte offset")
	c.Flags().StringVar(&length, "length", "", "number of bytes")
	c.Flags().StringVar(&writer, "writer", "", "writer id for fencing (default random)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		off, err := parseUint(offset)
		if err != nil {
			return fmt.Errorf("--offset: %w", err)
		}
		n, err := parseUint(length)
		if err != nil {
			return fmt.Errorf("--length: %w", err)
		}
		v, done, err := openVolume(cmd.Context(), connect, vol, writer)
		if err != nil {
			return err
		}
		defer done()
		return v.Decommit(cmd.Context(), off, n)
	}
	return c
}

func vdiskFenceCmd() *cobra.Command {
	var writer string
	var epoch uint64
	c := &cobra.Command{
		Use:   "fence --writer ID",
		Short: "Raise a writer's fencing epoch; returns once every brick refuses its older writes",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&writer, "writer", "", "writer id to fence")
	c.Flags().Uint64Var(&epoch, "epoch", 0, "new epoch (default: one above the current)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		var got uint64
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			r, err := c.Fence(ctx, &pb.FenceRequest{Writer: writer, Epoch: epoch})
			if err == nil {
				got = r.Epoch
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("fence: %s", coordclient.ErrorMessage(err))
		}
		fmt.Printf("writer %s fenced below epoch %d\n", writer, got)
		return nil
	}
	return c
}

func vdiskSnapshotCmd() *cobra.Command {
	var vol, name string
	c := &cobra.Command{
		Use:   "snapshot --volume NAME --name SNAP",
		Short: "Take a crash-consistent copy-on-write snapshot of a volume",
		Args:  cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&name, "name", "", "snapshot name")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.Snapshot(ctx, &pb.SnapshotRequest{Volume: vol, Name: name})
			return err
		})
		if err != nil {
			return fmt.Errorf("snapshot: %s", coordclient.ErrorMessage(err))
		}
		fmt.Printf("snapshot %s of volume %s taken\n", name, vol)
		return nil
	}
	return c
}

func vdiskSnapshotDeleteCmd() *cobra.Command {
	var vol, name string
	c := &cobra.Command{
		Use:   "snapshot-delete --volume NAME --name SNAP",
		Short: "Delete a snapshot of a volume; the bricks then free what only it kept",
		Long: `snapshot-delete removes the snapshot from the cluster map: reads of it fail
from then on. The primary of each placement group then removes, in the
background, the block versions no other snapshot and not the live volume
reads, and the bricks' cleaners reclaim their space.`,
		Example: "  plumeria vdisk snapshot-delete --coord 127.0.0.1:7001 --volume vol1 --name hourly-3",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.Flags().StringVar(&name, "name", "", "snapshot name")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		if err := volume.DeleteSnapshot(cmd.Context(), cl, vol, name); err != nil {
			return err
		}
		fmt.Printf("snapshot %s of volume %s deleted\n", name, vol)
		return nil
	}
	return c
}

func vdiskVerifyCmd() *cobra.Command {
	var vol string
	c := &cobra.Command{
		Use:   "verify --volume NAME",
		Short: "Check that the in-sync replicas of every placement group hold the same blocks (run it with no writes under way)",
		Long: `verify asks every in-sync member of each placement group for its block
inventory and compares them. With no writes under way they must agree: each
difference names the block and the sequence number each member holds. Exits
non-zero if any PG's replicas differ.`,
		Args: cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&vol, "volume", "", "volume name")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		v, done, err := openVolume(cmd.Context(), connect, vol, "")
		if err != nil {
			return err
		}
		defer done()
		var bar *progressbar.ProgressBar
		diffs, err := v.VerifyReplicas(cmd.Context(), func(n, total int) {
			if bar == nil {
				bar = progressbar.NewOptions(total, progressbar.OptionSetDescription("verify "+vol+": placement groups"),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }))
			}
			bar.Set(n)
		})
		if err != nil {
			return fmt.Errorf("verify %s: %w", vol, err)
		}
		for _, d := range diffs {
			fmt.Println(d)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("verify %s: %d blocks differ between in-sync replicas", vol, len(diffs))
		}
		fmt.Printf("verify %s: the in-sync replicas of every placement group agree\n", vol)
		return nil
	}
	return c
}
