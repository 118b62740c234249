package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/node"
)

func serverCmd() *cobra.Command {
	var cfg node.Config
	var join, coordAddrs, domain, capacity, logLevel string
	c := &cobra.Command{
		Use:   "server --name NAME --listen HOST:PORT --data DIR [--coordinator] [--brick]",
		Short: "Run coordinator and/or brick roles",
		Example: `  plumeria server --name c1 --listen 127.0.0.1:7001 --data /var/lib/plumeria/c1 --coordinator --brick --domain host=h1
  plumeria server --name b2 --listen 127.0.0.1:7002 --data /var/lib/plumeria/b2 --brick --coord 127.0.0.1:7001 --domain host=h2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Name == "" || cfg.Listen == "" || cfg.DataDir == "" {
				return fmt.Errorf("server: --name, --listen and --data are required")
			}
			if err := clustermap.ValidName(cfg.Name); err != nil {
				return fmt.Errorf("server: --name: %w", err)
			}
			var err error
			if cfg.Domain, err = parseDomain(domain); err != nil {
				return err
			}
			if cfg.CapacityBytes, err = parseBytes(capacity); err != nil {
				return fmt.Errorf("server: --capacity: %w", err)
			}
			cfg.Join = splitList(join)
			cfg.Coord = splitList(coordAddrs)
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("server: --log-level: %w", err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("node", cfg.Name)
			n, err := node.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			cfg.Logger.Info("serving", "addr", n.Addr(), "coordinator", cfg.Coordinator, "brick", cfg.Brick, "lock", cfg.Lock)
			select {
			case <-cmd.Context().Done():
				cfg.Logger.Info("stopping")
				n.Stop()
				return nil
			case err := <-n.Fatal():
				n.Stop()
				return err
			}
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.Name, "name", "", "unique name of this server in the cluster")
	f.StringVar(&cfg.Listen, "listen", "", "HOST:PORT for gRPC and Raft")
	f.StringVar(&cfg.Advertise, "advertise", "", "address others reach this server at (default: --listen)")
	f.StringVar(&cfg.DataDir, "data", "", "directory for this server's state")
	f.BoolVar(&cfg.Coordinator, "coordinator", false, "run the coordinator role (Raft member holding the cluster map)")
	f.BoolVar(&cfg.Brick, "brick", false, "run the brick role (stores volume data)")
	f.BoolVar(&cfg.Lock, "lock", false, "run the lock server role (serves the lock groups the coordinator assigns; issue B in progress, see docs/status.md)")
	f.StringVar(&join, "join", "", "comma-separated coordinators to join; without it a coordinator bootstraps a new cluster")
	f.StringVar(&coordAddrs, "coord", "", "comma-separated coordinator addresses a brick reports to (default: --join)")
	f.StringVar(&domain, "domain", "", "failure domains, e.g. host=h1,rack=r1,site=s1 (default host=<hostname>)")
	f.StringVar(&capacity, "capacity", "", "brick capacity, e.g. 100GiB (default: free space of --data)")
	f.StringVar(&cfg.MetricsListen, "metrics-listen", "", "HOST:PORT to serve Prometheus /metrics on")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return c
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseDomain(s string) (map[string]string, error) {
	d := map[string]string{}
	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("--domain: %q is not LEVEL=NAME", kv)
		}
		if k != clustermap.LevelHost && k != clustermap.LevelRack && k != clustermap.LevelSite {
			return nil, fmt.Errorf("--domain: unknown level %q (use host, rack, site)", k)
		}
		d[k] = v
	}
	if d[clustermap.LevelHost] == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--domain: no host given and hostname unknown: %w", err)
		}
		d[clustermap.LevelHost] = h
	}
	return d, nil
}
