package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/filesys"
	"github.com/plumeria-fs/plumeria/frontend/nfs"
	"github.com/plumeria-fs/plumeria/node"
)

func gatewayCmd() *cobra.Command {
	var name, id, listen, allow, metricsListen, logLevel, dataCache, state string
	var noRootSquash, readOnly bool
	var anonUID, anonGID uint32
	c := &cobra.Command{
		Use:   "gateway --coord ADDR --volume NAME --listen HOST:PORT --allow CIDR[,CIDR...]",
		Short: "Export a volume's file system over NFSv3 to machines that are not cluster members",
		Long: `gateway runs an fs node (the same file system code and locks as a mount,
coherent with every mount) that serves NFSv3 and MOUNT on one TCP port, and
answers the portmapper's GETPORT there too. The volume is exported as /NAME.
Every change is durable before its reply; UNSTABLE writes are made durable
by COMMIT. Only clients in --allow are served; root is squashed to
--anon-uid/--anon-gid unless --no-root-squash.

Clients name the port, there is no rpcbind:
  nfs-ls 'nfs://HOST/NAME?nfsport=PORT&mountport=PORT'
  fuse-nfs -a -q -T 0 -n 'nfs://HOST/NAME?nfsport=PORT&mountport=PORT&version=3' -m DIR`,
		Example: "  plumeria gateway --coord 127.0.0.1:7001 --volume default --listen 127.0.0.1:2049 --allow 127.0.0.1/32",
		Args:    cobra.NoArgs,
	}
	coordAddr, connect := coordFlags(c)
	var join joinOpts
	addJoinFlags(c, &join)
	c.Flags().StringVar(&name, "volume", "", "volume to export (as /NAME)")
	c.Flags().StringVar(&id, "name", "", "this fs node's name, unique in the cluster (default: HOST-nfs)")
	c.Flags().StringVar(&listen, "listen", "", "HOST:PORT to serve NFSv3, MOUNT and GETPORT on (TCP)")
	c.Flags().StringVar(&allow, "allow", "", "client networks served, comma separated CIDRs or addresses (e.g. 10.0.0.0/8,127.0.0.1)")
	c.Flags().BoolVar(&noRootSquash, "no-root-squash", false, "serve uid 0 as root (default: as --anon-uid)")
	c.Flags().BoolVar(&readOnly, "read-only", false, "refuse every change (NFS3ERR_ROFS)")
	c.Flags().Uint32Var(&anonUID, "anon-uid", 65534, "uid of squashed root and of AUTH_NONE callers")
	c.Flags().Uint32Var(&anonGID, "anon-gid", 65534, "gid of squashed root and of AUTH_NONE callers")
	c.Flags().StringVar(&dataCache, "data-cache", "256MiB", "clean file data this node keeps in memory (0: none)")
	c.Flags().StringVar(&state, "state", "", "file keeping the write verifier across clean restarts (default: none, clients resend unstable writes after every restart)")
	c.Flags().StringVar(&logLevel, "log-level", "warn", "debug, info, warn or error")
	c.Flags().StringVar(&metricsListen, "metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on (default: none)")
	var metricsInsecure bool
	c.Flags().BoolVar(&metricsInsecure, "metrics-insecure", false, "serve --metrics-listen over TLS without requiring a client certificate")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if name == "" || listen == "" || allow == "" {
			return fmt.Errorf("--volume, --listen and --allow are required")
		}
		prefixes, err := parseAllow(allow)
		if err != nil {
			return err
		}
		if id == "" {
			h, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("--name is required (no host name: %v)", err)
			}
			id = h + "-nfs"
		}
		ident, ca, stateDir, err := join.clientIdentity(cmd.Context(), "gateway", *coordAddr, id)
		if err != nil {
			return err
		}
		log, err := newLogger(logLevel)
		if err != nil {
			return err
		}
		cacheBytes, err := parseDataCache(dataCache)
		if err != nil {
			return err
		}
		cl, err := connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		keepRenewed(cmd.Context(), ident, ca, cl, stateDir, log)
		if metricsListen != "" {
			ms, err := node.ServeMetrics(metricsListen, metricsInsecure)
			if err != nil {
				return err
			}
			defer ms.Close()
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", listen, err)
		}
		defer ln.Close()
		nopts := node.FSNodeOptions{Logger: log, DataCacheBytes: cacheBytes}
		n, srv, err := startGateway(ctx, cl, name, id, ln, nfs.Options{Export: name, Allow: prefixes, NoRootSquash: noRootSquash,
			AnonUID: anonUID, AnonGID: anonGID, ReadOnly: readOnly, Verifier: loadVerifier(state, log), Logger: log}, nopts)
		if err != nil {
			return err
		}
		fmt.Printf("serving volume %s over NFSv3 on %s as /%s (node %s; clients: %s)\n", name, ln.Addr(), name, id, allow)
		fmt.Printf("  try: %s\n", nfsHint(ln.Addr(), name))
		for n != nil {
			select {
			case <-ctx.Done():
			case err = <-srv.served:
				if err != nil {
					log.Error("nfs: serving stopped", "err", err)
				}
			case <-n.Failed():
				n = remountGateway(ctx, cl, name, id, srv, n, nopts, log)
				continue
			}
			break
		}
		srv.Close()
		if n == nil {
			return err // stopped while mounting again
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if cerr := n.Close(cctx); cerr != nil {
			return fmt.Errorf("stop the fs node: %w (clients will resend their unstable writes)", cerr)
		}
		// Every write is durable: the next gateway may keep the verifier.
		saveVerifier(state, srv.Verifier(), log)
		return err
	}
	return selfIdentity(c)
}

// remountGateway mounts the volume again as node id after the gateway's
// fs node n stopped (a lost lease, a failed write: only a new node can
// serve), while the server answers NFS3ERR_JUKEBOX so that clients wait
// and retry; their handles stay valid (same file system). It returns the
// new node, or nil if ctx ended first.
func remountGateway(ctx context.Context, cl *coordclient.Client, name, id string, srv *gateway, n *node.FSNode, nopts node.FSNodeOptions, log *slog.Logger) *node.FSNode {
	srv.Suspend(errors.New("the gateway's fs node stopped"))
	log.Error("nfs: the file system stopped (see above: a lost lease or a failed write); clients wait (NFS3ERR_JUKEBOX) while this gateway mounts it again")
	n.Crash() // its session is fenced already; its log is another node's to replay
	for {
		m, err := node.MountFS(ctx, cl, name, id, nopts)
		if err == nil {
			srv.Resume(m.FS)
			return m
		}
		log.Error("nfs: mount again failed; retrying in 5s", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

// gateway is an NFS server being served in the background.
type gateway struct {
	*nfs.Server
	served <-chan error // Serve's end
}

// startGateway starts fs node id of volume name and serves it over
// NFSv3 on ln in the background.
func startGateway(ctx context.Context, cl *coordclient.Client, name, id string, ln net.Listener, opts nfs.Options, nopts node.FSNodeOptions) (*node.FSNode, *gateway, error) {
	n, err := node.MountFS(ctx, cl, name, id, nopts)
	if err != nil {
		if errors.Is(err, filesys.ErrNotFormatted) {
			return nil, nil, fmt.Errorf("%w: run plumeria format --volume %s first", err, name)
		}
		return nil, nil, err
	}
	uuid, key, _ := n.FS.Identity()
	srv, err := nfs.New(n.FS, uuid, key, opts)
	if err != nil {
		n.Close(context.Background())
		return nil, nil, err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return n, &gateway{srv, served}, nil
}

// nfsHint is a command that lists the export at addr.
func nfsHint(addr net.Addr, volume string) string {
	return fmt.Sprintf("nfs-ls 'nfs://%s/%s?nfsport=%d&mountport=%d'", hostOf(addr), volume, portOf(addr), portOf(addr))
}

// parseAllow reads --allow: CIDRs or single addresses.
func parseAllow(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("--allow %q: not a CIDR or an address (e.g. 10.0.0.0/8 or 127.0.0.1)", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	if len(out) == 0 {
		return nil, errors.New("--allow names no client network")
	}
	return out, nil
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && !t.IP.IsUnspecified() {
		return t.IP.String()
	}
	return "HOST"
}

func portOf(a net.Addr) int {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port
	}
	return 0
}

// gatewayState is what --state keeps: the write verifier of a gateway
// that stopped with every write durable. It is removed when read, so a
// gateway that dies later starts with a new verifier.
type gatewayState struct {
	Verifier uint64 `json:"verifier"`
}

func loadVerifier(path string, log *slog.Logger) uint64 {
	if path == "" {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	os.Remove(path)
	var st gatewayState
	if err := json.Unmarshal(b, &st); err != nil {
		log.Warn("nfs: ignoring an unreadable --state file (clients resend their unstable writes)", "file", path, "err", err)
		return 0
	}
	return st.Verifier
}

func saveVerifier(path string, v uint64, log *slog.Logger) {
	if path == "" {
		return
	}
	b, _ := json.Marshal(gatewayState{Verifier: v})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		log.Warn("nfs: could not keep the write verifier", "file", path, "err", err)
	}
}
