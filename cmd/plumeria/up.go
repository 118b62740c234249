package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/frontend/fuse"
	"github.com/plumeria-fs/plumeria/frontend/nfs"
	"github.com/plumeria-fs/plumeria/internal/pb"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/node"
)

// localCluster is a coordinator and n bricks in this process, each on its
// own loopback port, with state under dir. `up` and `bench vdisk` use it.
type localCluster struct {
	nodes []*node.Node
	coord string
	http  string // the coordinator's dashboard and /metrics; "" none
}

// startLocalCluster starts the cluster; httpAddr (may be "") is where the
// coordinator serves its dashboard and /metrics.
func startLocalCluster(ctx context.Context, dir, host string, basePort, bricks int, httpAddr string, log *slog.Logger) (*localCluster, error) {
	lc := &localCluster{}
	addr := func(i int) string { return net.JoinHostPort(host, strconv.Itoa(basePort+i)) }
	if basePort == 0 {
		addr = func(int) string { return net.JoinHostPort(host, "0") }
	}
	// The dashboard on loopback asks no client certificate (a browser on
	// this machine has none); elsewhere it does.
	c, err := node.Start(ctx, node.Config{Name: "coord1", Listen: addr(0), DataDir: filepath.Join(dir, "coord1"), Coordinator: true, Lock: true,
		MetricsListen: httpAddr, MetricsInsecure: loopback(httpAddr), Logger: log})
	if err != nil {
		return nil, err
	}
	lc.nodes = append(lc.nodes, c)
	lc.coord, lc.http = c.Addr(), httpAddr
	for i := 1; i <= bricks; i++ {
		name := fmt.Sprintf("brick%d", i)
		// All bricks share this machine: their host domain says so.
		b, err := node.Start(ctx, node.Config{Name: name, Listen: addr(i), DataDir: filepath.Join(dir, name), Brick: true,
			Coord: []string{lc.coord}, Domain: map[string]string{"host": "localhost"}, Logger: log})
		if err != nil {
			lc.stop()
			return nil, err
		}
		lc.nodes = append(lc.nodes, b)
	}
	return lc, nil
}

// loopback reports whether HOST:PORT is on a loopback address.
func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func (lc *localCluster) stop() {
	for i := len(lc.nodes) - 1; i >= 0; i-- {
		lc.nodes[i].Stop()
	}
}

// ensureVolume creates a volume with replicas copies (keeping file versions
// if fileVersions) unless it exists, and returns the copies it has.
func ensureVolume(ctx context.Context, cl *coordclient.Client, name string, replicas uint32, fileVersions bool) (uint32, error) {
	m, err := cl.Map(ctx, 0)
	if err != nil {
		return 0, err
	}
	if v := m.Volume(name); v != nil {
		return uint32(v.Replicas), nil
	}
	return replicas, cl.Call(ctx, func(ctx context.Context, c pb.CoordinatorClient) error {
		_, err := c.CreateVolume(ctx, &pb.CreateVolumeRequest{Name: name, Replicas: replicas, AllowSameDomain: true, FileVersions: fileVersions})
		return err
	})
}

func upCmd() *cobra.Command {
	var dir, mnt, httpAddr, nfsAddr string
	var port int
	var replicas uint32
	var fileVersions bool
	c := &cobra.Command{
		Use:   "up [--dir DIR] [--mount MNT]",
		Short: "Run an all-in-one cluster on this machine (coordinator + lock server + 3 bricks), mounted; Ctrl-C unmounts and stops it",
		Args:  cobra.NoArgs,
	}
	c.Flags().StringVar(&dir, "dir", defaultUpDir(), "where the cluster keeps its state")
	c.Flags().StringVar(&mnt, "mount", "", "mount point (default DIR/mnt); created if missing")
	c.Flags().IntVar(&port, "port", 7001, "first of four consecutive loopback ports")
	c.Flags().StringVar(&httpAddr, "http", "", `HOST:PORT of the web dashboard and /metrics (default 127.0.0.1:<port+9>; "none" for neither)`)
	c.Flags().Uint32Var(&replicas, "replicas", 3, "copies of every chunk of the volume, 1 to 3 (when the volume is created: an existing DIR keeps its own)")
	c.Flags().StringVar(&nfsAddr, "nfs", "", "also serve the volume over NFSv3 on this HOST:PORT to clients on loopback, root not squashed (plumeria gateway serves other machines)")
	c.Flags().BoolVar(&fileVersions, "file-versions", false, "keep a version of each file at every close that changed it, and directories' name histories (MNT/.plumeria/at/T; when the volume is created). Old versions' space is not given back yet")
	selfIdentity(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if replicas < 1 || replicas > 3 {
			return fmt.Errorf("up: --replicas %d: the cluster has 3 bricks, give 1, 2 or 3", replicas)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("up: %w", err)
		}
		switch httpAddr {
		case "":
			httpAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port+9))
		case "none":
			httpAddr = ""
		}
		// TLS: a CA in DIR/certs (or --certs), made the first time; every
		// part of the cluster in this process shares one certificate
		// (DIR/tls).
		certs := ""
		if !tlsFlags.insecure {
			certs = filepath.Join(dir, "certs")
			if cmd.Flags().Changed("certs") {
				certs = tlsFlags.certs // given explicitly; PLUMERIA_CERTS is not looked at
			}
			if _, err := os.Stat(filepath.Join(certs, pki.CACertFile)); errors.Is(err, os.ErrNotExist) {
				if err := initCerts(certs, "", false); err != nil {
					return fmt.Errorf("up: %w", err)
				}
			}
		}
		id, err := localIdentity(certs, filepath.Join(dir, "tls"))
		if err != nil {
			return fmt.Errorf("up: %w", err)
		}
		if certs != "" && id == nil {
			return fmt.Errorf("up: %s has no %s: up needs it to issue its certificate (or pass --insecure)", certs, pki.CAKeyFile)
		}
		pki.SetDefault(id)
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		lc, err := startLocalCluster(cmd.Context(), dir, "127.0.0.1", port, 3, httpAddr, log)
		if err != nil {
			return fmt.Errorf("up: %w", err)
		}
		defer lc.stop()
		cl, err := coordclient.New(lc.coord)
		if err != nil {
			return err
		}
		defer cl.Close()
		have, err := ensureVolume(cmd.Context(), cl, "default", replicas, fileVersions)
		if err != nil {
			return fmt.Errorf("up: create volume: %s", coordclient.ErrorMessage(err))
		}
		if err := ensureFormatted(cmd.Context(), cl, "default"); err != nil {
			return fmt.Errorf("up: %w", err)
		}
		if mnt == "" {
			mnt = filepath.Join(dir, "mnt")
		}
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			return fmt.Errorf("up: mount point: %w", err)
		}
		var nfsLn net.Listener
		if nfsAddr != "" {
			if nfsLn, err = net.Listen("tcp", nfsAddr); err != nil {
				return fmt.Errorf("up: --nfs: %w", err)
			}
			defer nfsLn.Close()
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		host, _ := os.Hostname()
		m, err := mountFS(ctx, cl, "default", "up-"+host, mnt, mountOptions{fuse: fuse.Options{CacheTimeout: kernelCacheDefault}}, log)
		if err != nil {
			return fmt.Errorf("up: %w", err)
		}
		nfsLine := ""
		if nfsLn != nil {
			// A node of its own: the FUSE node's kernel caches are kept
			// coherent by the locks only with other nodes' changes.
			gw, srv, err := startGateway(ctx, cl, "default", "up-"+host+"-nfs", nfsLn, nfs.Options{Export: "default", NoRootSquash: true, Logger: log,
				Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, node.FSNodeOptions{Logger: log})
			if err != nil {
				stop()
				m.wait(ctx)
				return fmt.Errorf("up: --nfs: %w", err)
			}
			m.beforeClose = func() {
				srv.Close()
				cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := gw.Close(cctx); err != nil {
					fmt.Fprintf(os.Stderr, "stop the NFS gateway's fs node: %v\n", err)
				}
			}
			nfsLine = fmt.Sprintf("NFSv3 export /default on %s (loopback clients): %s\n", nfsLn.Addr(), nfsHint(nfsLn.Addr(), "default"))
		}
		fmt.Printf("Plumeria is up: coordinator %s, lock server, 3 bricks, volume \"default\" (%d replicas), state in %s\n", lc.coord, have, dir)
		fmt.Printf("mounted on %s\n", mnt)
		fmt.Print(nfsLine)
		switch {
		case lc.http != "" && id == nil:
			fmt.Printf("dashboard: http://%s/\n", lc.http)
		case lc.http != "" && loopback(lc.http):
			fmt.Printf("dashboard: https://%s/ (TLS with the cluster's own CA, no client certificate asked on loopback: your browser warns about the CA)\n", lc.http)
		case lc.http != "":
			fmt.Printf("dashboard: https://%s/ (asks for a client certificate of the cluster CA, e.g. %s)\n", lc.http, filepath.Join(certs, pki.AdminCertFile))
		}
		if certs != "" {
			abs, _ := filepath.Abs(certs)
			fmt.Printf("mutual TLS with the CA in %s; for other commands:\n  export PLUMERIA_CERTS=%s\n", abs, abs)
		}
		fmt.Printf("try:\n  echo hello > %s/hello && cat %s/hello\n  plumeria status --coord %s\n"+
			"  plumeria snapshot create --coord %s --volume default first && ls %s/.plumeria/snapshots/first\n",
			mnt, mnt, lc.coord, lc.coord, mnt)
		if m.versions {
			fmt.Printf("  plumeria versions %s/hello; ls %s/.plumeria/at/$(date +%%s)/\n", mnt, mnt)
		} else {
			fmt.Printf("  (a version of every file at each close: a new DIR with plumeria up --file-versions)\n")
		}
		fmt.Printf("Ctrl-C unmounts and stops.\n")
		err = m.wait(ctx)
		fmt.Println("stopped")
		return err
	}
	return c
}

// ensureFormatted formats volume name the first time.
func ensureFormatted(ctx context.Context, cl *coordclient.Client, name string) error {
	err := formatVolume(ctx, cl, name, 3, false, false, nil)
	if errors.Is(err, filesys.ErrFormatted) {
		return nil
	}
	return err
}
func defaultUpDir() string {
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".plumeria", "up")
	}
	return "plumeria-up"
}
