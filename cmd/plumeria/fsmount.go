package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/filesys/history"
	"github.com/plumeria-fs/plumeria/frontend/fuse"
	"github.com/plumeria-fs/plumeria/node"
	"github.com/plumeria-fs/plumeria/volume"
)

func formatCmd() *cobra.Command {
	var name string
	var force, fileVersions bool
	var replicas uint32
	c := &cobra.Command{
		Use:     "format --coord ADDR --volume NAME",
		Short:   "Write a fresh file system on a volume (created if missing)",
		Example: "  plumeria format --coord 127.0.0.1:7001 --volume home --replicas 3",
		Args:    cobra.NoArgs,
	}
	connect := coordFlag(c)
	c.Flags().StringVar(&name, "volume", "", "volume name")
	c.Flags().BoolVar(&force, "force", false, "erase an existing file system (no node may have it mounted)")
	c.Flags().Uint32Var(&replicas, "replicas", 3, "copies of every chunk when the volume is created")
	c.Flags().BoolVar(&fileVersions, "file-versions", false, "when the volume is created: keep a version of each file at every close that changed it (MNT/.plumeria/at/T, plumeria versions)")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if name == "" {
			return fmt.Errorf("--volume is required")
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		return formatVolume(cmd.Context(), cl, name, replicas, fileVersions, force, os.Stdout)
	}
	return c
}

// formatVolume creates volume name unless it exists and formats it.
func formatVolume(ctx context.Context, cl *coordclient.Client, name string, replicas uint32, fileVersions, force bool, out *os.File) error {
	if replicas < 1 {
		return fmt.Errorf("--replicas must be at least 1")
	}
	if _, err := ensureVolume(ctx, cl, name, replicas, fileVersions); err != nil {
		return fmt.Errorf("create volume %s: %s", name, coordclient.ErrorMessage(err))
	}
	vol, err := volume.Open(ctx, cl, name, volume.Options{Writer: "format"})
	if err != nil {
		return fmt.Errorf("open volume %s: %w", name, err)
	}
	defer vol.Close()
	s, err := filesys.Format(ctx, node.NewFSDevice(vol), force, time.Now())
	if err != nil {
		return fmt.Errorf("format %s: %w", name, err)
	}
	if out != nil {
		fmt.Fprintf(out, "formatted volume %s: file system %x\n", name, s.UUID)
	}
	return nil
}

func mountCmd() *cobra.Command {
	var name, id, snap, metricsListen, logLevel string
	var debug bool
	var kernelCache, moveInterval, moveQuiet time.Duration
	var dataCache, readAhead string
	c := &cobra.Command{
		Use:     "mount --coord ADDR --volume NAME [--snapshot SNAP] MOUNTPOINT",
		Short:   "Mount a volume's file system (runs until unmounted or SIGTERM/SIGINT)",
		Example: "  plumeria mount --coord 127.0.0.1:7001 --volume home /mnt/home --name node1 --metrics-listen :9101",
		Args:    cobra.ExactArgs(1),
	}
	coordAddr, connect := coordFlags(c)
	var join joinOpts
	addJoinFlags(c, &join)
	c.Flags().StringVar(&name, "volume", "", "volume name")
	c.Flags().StringVar(&id, "name", "", "this fs node's name, unique in the cluster (default: the host name)")
	c.Flags().StringVar(&snap, "snapshot", "", "mount this snapshot of the volume, read-only (plumeria snapshot list shows them)")
	c.Flags().BoolVar(&debug, "debug", false, "log every FUSE request")
	c.Flags().DurationVar(&kernelCache, "kernel-cache", kernelCacheDefault,
		"how long the kernel may keep names and attributes (dropped at once when another node changes them; 0: cache nothing)")
	c.Flags().StringVar(&dataCache, "data-cache", "256MiB",
		"clean file data this node keeps in memory (dropped when another node may change it; 0: none)")
	c.Flags().StringVar(&readAhead, "read-ahead", "8MiB",
		"how far ahead of a sequential reader the kernel reads, in READs of up to 1 MiB in flight together (root only; 0: the kernel's 128 KiB)")
	c.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	c.Flags().StringVar(&metricsListen, "metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (default: none)")
	var metricsInsecure bool
	c.Flags().BoolVar(&metricsInsecure, "metrics-insecure", false, "serve --metrics-listen over TLS without requiring a client certificate")
	c.Flags().DurationVar(&moveInterval, "policy-interval", 10*time.Minute,
		"how often the policy mover walks the whole tree (one node at a time cluster-wide; a policy change or a rename moves its files at once)")
	c.Flags().DurationVar(&moveQuiet, "policy-quiet", 10*time.Minute,
		"a file changed within this long stays replicated until a later pass (new data is coded once it stops changing; 0: at once)")
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if name == "" {
			return fmt.Errorf("--volume is required")
		}
		if id == "" {
			h, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("--name is required (no host name: %v)", err)
			}
			id = h
		}
		ident, ca, stateDir, err := join.clientIdentity(cmd.Context(), "mount", *coordAddr, id)
		if err != nil {
			return err
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		keepRenewed(cmd.Context(), ident, ca, cl, stateDir, slog.Default())
		if metricsListen != "" {
			ms, err := node.ServeMetrics(metricsListen, metricsInsecure)
			if err != nil {
				return err
			}
			defer ms.Close()
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		log, err := newLogger(logLevel)
		if err != nil {
			return err
		}
		cacheBytes, err := parseDataCache(dataCache)
		if err != nil {
			return err
		}
		raBytes, err := parseBytes(readAhead)
		if err != nil {
			return fmt.Errorf("--read-ahead %q: %w", readAhead, err)
		}
		if raBytes == 0 {
			raBytes = -1 // the kernel's
		}
		if moveInterval <= 0 || moveQuiet < 0 {
			return fmt.Errorf("--policy-interval must be positive and --policy-quiet not negative")
		}
		if moveQuiet == 0 {
			moveQuiet = -1 // node.FSNodeOptions: below 0 is no wait
		}
		mo := mountOptions{fuse: fuse.Options{Debug: debug, CacheTimeout: kernelCache, ReadAhead: int(raBytes)}, dataCache: cacheBytes,
			moveInterval: moveInterval, moveQuiet: moveQuiet}
		if snap != "" {
			m, err := mountSnapshot(ctx, cl, name, snap, args[0], mo, log)
			if err != nil {
				return err
			}
			fmt.Printf("mounted snapshot %s of volume %s on %s, read-only\n", snap, name, args[0])
			return m.wait(ctx)
		}
		m, err := mountFS(ctx, cl, name, id, args[0], mo, log)
		if err != nil {
			return err
		}
		fmt.Printf("mounted volume %s on %s as node %s\n", name, args[0], id)
		return m.wait(ctx)
	}
	return selfIdentity(c)
}

// fsMount is a mounted fs node (or snapshot): file system and FUSE server.
type fsMount struct {
	close    func(context.Context) error // what the FUSE server served
	srv      *fuse.Server
	dir      string
	versions bool // the volume keeps file versions
	// beforeClose runs once the kernel let go, before the file system
	// closes (an NFS gateway on the same fs node stops there).
	beforeClose func()
}

// kernelCacheDefault is how long the kernel keeps names and attributes
// (frontend/fuse Options.CacheTimeout): long, since they are invalidated
// whenever another node is about to change them.
const kernelCacheDefault = time.Hour

// mountOptions are a mount's settings: the FUSE adapter's (Volume and
// Logger are filled in) and the fs node's data cache bound
// (node.FSNodeOptions.DataCacheBytes).
type mountOptions struct {
	fuse      fuse.Options
	dataCache int64
	// moveInterval and moveQuiet: node.FSNodeOptions.MoveInterval and
	// MoveQuiet (the policy mover's).
	moveInterval, moveQuiet time.Duration
}

// mountFS mounts volume name on dir as node id.
func mountFS(ctx context.Context, cl *coordclient.Client, name, id, dir string, mo mountOptions, log *slog.Logger) (*fsMount, error) {
	if err := checkMountPoint(dir); err != nil {
		return nil, err
	}
	n, err := node.MountFS(ctx, cl, name, id, node.FSNodeOptions{Logger: log, DataCacheBytes: mo.dataCache, StreamReads: true,
		MoveInterval: mo.moveInterval, MoveQuiet: mo.moveQuiet})
	if err != nil {
		if errors.Is(err, filesys.ErrNotFormatted) {
			return nil, fmt.Errorf("%w: run plumeria format --volume %s first", err, name)
		}
		return nil, err
	}
	opts := mo.fuse
	opts.Volume, opts.Logger = name, log
	// The mount shows the volume's snapshots under .plumeria.
	view := history.New(n.FS, node.Snapshots(cl, name, node.FSNodeOptions{Logger: log, DataCacheBytes: mo.dataCache, StreamReads: true}))
	m, err := serveMount(dir, view, opts, func(ctx context.Context) error {
		view.CloseSnapshots(ctx)
		return n.Close(ctx)
	})
	if m != nil {
		m.versions = n.FS.KeepsVersions()
	}
	return m, err
}

// mountSnapshot mounts snapshot snap of volume name on dir, read-only.
func mountSnapshot(ctx context.Context, cl *coordclient.Client, name, snap, dir string, mo mountOptions, log *slog.Logger) (*fsMount, error) {
	if err := checkMountPoint(dir); err != nil {
		return nil, err
	}
	snaps, err := node.Snapshots(cl, name, node.FSNodeOptions{}).List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the snapshots of volume %s: %w", name, err)
	}
	if !slices.ContainsFunc(snaps, func(s history.Snapshot) bool { return s.Name == snap }) {
		return nil, fmt.Errorf("volume %s has no snapshot %q (plumeria snapshot list --volume %s shows them)", name, snap, name)
	}
	n, err := node.MountSnapshot(ctx, cl, name, snap, node.FSNodeOptions{Logger: log, DataCacheBytes: mo.dataCache, StreamReads: true})
	if err != nil {
		return nil, err
	}
	opts := mo.fuse
	opts.Volume, opts.Logger, opts.ReadOnly = name+"@"+snap, log, true
	return serveMount(dir, n.FS, opts, n.Close)
}

// newLogger is the logger of --log-level.
func newLogger(logLevel string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q is not a level (use debug, info, warn or error)", logLevel)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})), nil
}

// parseDataCache reads --data-cache (node.FSNodeOptions.DataCacheBytes:
// 0 becomes -1, none).
func parseDataCache(s string) (int64, error) {
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("--data-cache %q: %w", s, err)
	}
	if n == 0 {
		n = -1 // none
	}
	return n, nil
}

func checkMountPoint(dir string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("mount point %s: not a directory (create it first)", dir)
	}
	return nil
}

// serveMount serves fsys on dir; closeFn closes what it stands on (also
// when the mount fails).
func serveMount(dir string, fsys fuse.FileSystem, opts fuse.Options, closeFn func(context.Context) error) (*fsMount, error) {
	srv, err := fuse.Mount(dir, fsys, opts)
	if err != nil {
		closeFn(context.Background())
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	return &fsMount{close: closeFn, srv: srv, dir: dir}, nil
}

// wait serves until ctx ends (then unmounts) or the mount goes away
// (umount by the user), then writes everything back and leaves.
func (m *fsMount) wait(ctx context.Context) error {
	gone := make(chan struct{})
	go func() { m.srv.Wait(); close(gone) }()
	select {
	case <-ctx.Done():
		if err := m.srv.Unmount(); err != nil {
			fmt.Fprintf(os.Stderr, "unmount %s: %v\n", m.dir, err)
		}
		<-gone
	case <-gone:
	}
	if m.beforeClose != nil {
		m.beforeClose()
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.close(cctx); err != nil {
		return fmt.Errorf("unmount %s: %w", m.dir, err)
	}
	return nil
}
