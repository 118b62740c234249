package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pb"
)

// coordFlag adds --coord and returns a function that connects.
func coordFlag(c *cobra.Command) func() (*coordclient.Client, error) {
	_, connect := coordFlags(c)
	return connect
}

// coordFlags is coordFlag that also returns the flag's value.
func coordFlags(c *cobra.Command) (*string, func() (*coordclient.Client, error)) {
	addr := c.Flags().String("coord", "127.0.0.1:7001", "comma-separated coordinator addresses")
	return addr, func() (*coordclient.Client, error) { return coordclient.New(*addr) }
}

func volumeCmd() *cobra.Command {
	c := &cobra.Command{Use: "volume", Short: "Create and list virtual disks"}
	var replicas, pgs uint32
	var chunk string
	var allowSame, fileVersions bool
	var class, domain string
	create := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a sparse 2^64-byte virtual disk",
		Example: "  plumeria volume create --coord 127.0.0.1:7001 vol1 --replicas 3 --chunk-size 1MiB",
		Args:    cobra.ExactArgs(1),
	}
	connect := coordFlag(create)
	create.Flags().Uint32Var(&replicas, "replicas", 3, "copies of every chunk, on distinct hosts")
	create.Flags().StringVar(&chunk, "chunk-size", "1MiB", "unit of placement (power of two, 4KiB to 16MiB)")
	create.Flags().Uint32Var(&pgs, "pgs", 0, "placement groups (default 64)")
	create.Flags().BoolVar(&allowSame, "allow-same-domain", false, "allow replicas on the same host")
	create.Flags().StringVar(&class, "class", "", "place the volume only on bricks of this storage class (brick --class; default: any)")
	create.Flags().StringVar(&domain, "domain", "host", "failure-domain level at which copies must differ: host, rack or site (bricks need that label in --domain)")
	create.Flags().BoolVar(&fileVersions, "file-versions", false, "keep a version of each file every time it is closed, sharing unchanged blocks (cannot be changed later)")
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if replicas < 1 {
			return fmt.Errorf("--replicas must be at least 1")
		}
		if class != "" {
			if err := clustermap.ValidClass(class); err != nil {
				return fmt.Errorf("--class: %w", err)
			}
		}
		if err := clustermap.ValidDomainLevel(domain); err != nil {
			return fmt.Errorf("--domain: %w", err)
		}
		cb, err := parseUint(chunk)
		if err != nil {
			return fmt.Errorf("--chunk-size: %w", err)
		}
		if cb > 1<<31 {
			return fmt.Errorf("--chunk-size: %s is too large", chunk)
		}
		if err := clustermap.ValidChunkBytes(uint32(cb)); err != nil {
			return fmt.Errorf("--chunk-size: %w", err)
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		err = cl.Call(cmd.Context(), func(ctx context.Context, c pb.CoordinatorClient) error {
			_, err := c.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: args[0], Replicas: replicas, ChunkBytes: uint32(cb), Pgs: pgs, AllowSameDomain: allowSame, FileVersions: fileVersions,
				Class: class, Domain: domain})
			return err
		})
		if err != nil {
			return fmt.Errorf("volume create: %s", coordclient.ErrorMessage(err))
		}
		with := ""
		if fileVersions {
			with = ", file versions"
		}
		fmt.Printf("created volume %s (%d replicas, %s chunks%s)\n", args[0], replicas, chunk, with)
		return nil
	}
	c.AddCommand(create)
	return c
}
