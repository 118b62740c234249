package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/plumeria-fs/plumeria/coordclient"
	"github.com/plumeria-fs/plumeria/internal/pki"
	"github.com/plumeria-fs/plumeria/internal/serverconf"
	"github.com/plumeria-fs/plumeria/node"
)

func serverCmd() *cobra.Command {
	flags := serverconf.Defaults()
	var file string
	var printConfig bool
	c := &cobra.Command{
		Use:   "server --name NAME --listen HOST:PORT --data DIR [--coordinator] [--brick] [--lock] | --config FILE",
		Short: "Run coordinator, brick and/or lock server roles",
		Long: `Run coordinator, brick and/or lock server roles. Settings come from flags, from a TOML
file (--config; keys are the flag names, see deploy/plumeria.example.toml), or both: a flag
given on the command line overrides the file.`,
		Example: `  plumeria server --name c1 --listen 127.0.0.1:7001 --data /var/lib/plumeria/c1 --coordinator --brick --domain host=h1
  plumeria server --name b2 --listen 127.0.0.1:7002 --data /var/lib/plumeria/b2 --brick --coord 127.0.0.1:7001 --domain host=h2
  plumeria server --config /etc/plumeria/plumeria.toml --log-level debug --print-config`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := serverconf.Defaults()
			if file != "" {
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("server: %w", err)
				}
				if cfg, err = serverconf.Decode(file, b); err != nil {
					return fmt.Errorf("server: %w", err)
				}
			}
			cfg, err := serverconf.Override(cfg, flags, serverconf.Given(cmd.Flags()))
			if err != nil {
				return fmt.Errorf("server: %w", err)
			}
			if cfg.Certs == "" && !cfg.Insecure && cfg.Token == "" {
				cfg.Certs = os.Getenv("PLUMERIA_CERTS")
			}
			if cfg.Domain.Host == "" {
				h, err := os.Hostname()
				if err != nil {
					return fmt.Errorf("server: no domain host given and hostname unknown: %w", err)
				}
				cfg = cfg.Resolve(h)
			}
			if printConfig {
				_, err := os.Stdout.Write(serverconf.Encode(cfg))
				return err
			}
			if err := cfg.Complete(); err != nil {
				return fmt.Errorf("server: %w", err)
			}
			return runServer(cmd, cfg)
		},
	}
	f := c.Flags()
	serverconf.Bind(f, &flags)
	f.StringVar(&file, "config", "", "TOML file with the settings (keys are the flag names); flags given override it")
	f.BoolVar(&printConfig, "print-config", false, "print the effective settings (defaults, then --config, then flags) as TOML and exit")
	return selfIdentity(c)
}

func runServer(cmd *cobra.Command, sc serverconf.Config) error {
	var roles []string
	for _, r := range []struct {
		on   bool
		role string
	}{{sc.Coordinator, pki.RoleCoordinator}, {sc.Brick, pki.RoleBrick}, {sc.Lock, pki.RoleLock}} {
		if r.on {
			roles = append(roles, r.role)
		}
	}
	// A coordinator that joins asks the coordinators it joins; a brick or
	// lock server the ones it reports to.
	coords := sc.Coord
	if len(coords) == 0 || sc.Coordinator {
		coords = sc.Join
	}
	stateDir := filepath.Join(sc.Data, "tls")
	id, ca, err := identityFor(cmd.Context(), "server", sc.Certs, sc.Insecure, sc.Token, coords, stateDir, sc.Name, roles...)
	if err != nil {
		return err
	}
	pki.SetDefault(id)
	cfg := node.Config{Name: sc.Name, Listen: sc.Listen, Advertise: sc.Advertise, DataDir: sc.Data,
		Coordinator: sc.Coordinator, Brick: sc.Brick, Lock: sc.Lock, Join: sc.Join, Coord: sc.Coord,
		Domain: sc.Domain.Map(), CapacityBytes: sc.CapacityBytes(), Class: sc.Class, MetricsListen: sc.MetricsListen,
		MetricsInsecure: sc.MetricsInsecure, CA: ca, CertLifetime: sc.CertLifetimeDuration()}
	if sc.Coordinator && sc.Certs != "" {
		if cfg.Tokens, err = readInitToken(sc.Certs); err != nil {
			return fmt.Errorf("server: %w", err)
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: sc.SlogLevel()})).With("node", cfg.Name)
	n, err := node.Start(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	var renewCC *coordclient.Client
	if ca == nil && id != nil {
		if renewCC, err = coordclient.New(append(coords, sc.Coord...)...); err != nil {
			n.Stop()
			return err
		}
		defer renewCC.Close()
	}
	keepRenewed(cmd.Context(), id, ca, renewCC, stateDir, cfg.Logger)
	cfg.Logger.Info("serving", "addr", n.Addr(), "coordinator", cfg.Coordinator, "brick", cfg.Brick, "lock", cfg.Lock, "tls", id != nil)
	select {
	case <-cmd.Context().Done():
		cfg.Logger.Info("stopping")
		n.Stop()
		return nil
	case err := <-n.Fatal():
		n.Stop()
		return err
	}
}
