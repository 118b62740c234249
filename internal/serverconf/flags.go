package serverconf

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/plumeria-fs/plumeria/clustermap"
)

// usage is each setting's flag help; docs/operations.md and the example
// file say the same at more length.
var usage = map[string]string{
	"name":             "unique name of this server in the cluster",
	"listen":           "HOST:PORT for gRPC and Raft",
	"advertise":        "address others reach this server at (default: --listen)",
	"data":             "directory for this server's state",
	"coordinator":      "run the coordinator role (Raft member holding the cluster map)",
	"brick":            "run the brick role (stores volume data)",
	"lock":             "run the lock server role (serves the lock groups the coordinator assigns)",
	"join":             "comma-separated coordinators to join; without it a coordinator bootstraps a new cluster",
	"coord":            "comma-separated coordinator addresses a brick or lock server reports to (default: --join)",
	"domain":           "failure domains, e.g. host=h1,rack=r1,site=s1 (default host=<hostname>)",
	"capacity":         "brick capacity, e.g. 100GiB (default: free space of --data)",
	"class":            "brick storage class, e.g. ssd or hdd; volumes created with --class use only bricks of theirs (default: default)",
	"metrics-listen":   "HOST:PORT to serve Prometheus /metrics on (default: none)",
	"metrics-insecure": "serve the metrics port over TLS without requiring a client certificate (for a scraper without one)",
	"certs":            "certs directory `DIR` made by plumeria init (default: $PLUMERIA_CERTS); with ca.key in it the server issues its own certificate into DATA/tls",
	"insecure":         "run without TLS: plaintext, no authentication (tests and trusted networks only)",
	"token":            "join token (plumeria token create): without a certs directory, get this server's certificate from a coordinator with it (once; kept in DATA/tls)",
	"cert-lifetime":    "coordinator: lifetime of the certificates it issues to nodes that join with a token or renew, e.g. 720h (default: a year); members renew at two thirds of it",
	"log-level":        "debug, info, warn or error",
}

// Bind defines one flag per setting on fs, writing into c, with c's
// current values as the defaults shown in --help.
func Bind(fs *pflag.FlagSet, c *Config) {
	for _, key := range Keys() {
		switch p := field(c, key).Addr().Interface().(type) {
		case *string:
			fs.StringVar(p, key, *p, usage[key])
		case *bool:
			fs.BoolVar(p, key, *p, usage[key])
		case *[]string:
			fs.Var(&listValue{p}, key, usage[key])
		case *Domain:
			fs.Var(&domainValue{p}, key, usage[key])
		default:
			panic(fmt.Sprintf("serverconf: no flag type for key %q (%T)", key, p))
		}
	}
}

// Given returns the keys whose flags were set on the command line.
func Given(fs *pflag.FlagSet) []string {
	known := map[string]bool{}
	for _, k := range Keys() {
		known[k] = true
	}
	var set []string
	fs.Visit(func(f *pflag.Flag) {
		if known[f.Name] {
			set = append(set, f.Name)
		}
	})
	return set
}

// listValue is a comma-separated list; repeating the flag adds to it.
type listValue struct{ p *[]string }

func (v *listValue) String() string { return strings.Join(*v.p, ",") }
func (v *listValue) Type() string   { return "ADDR,..." }
func (v *listValue) Set(s string) error {
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*v.p = append(*v.p, e)
		}
	}
	return nil
}

// domainValue is "host=H,rack=R,site=S"; the flag replaces every level.
type domainValue struct{ p *Domain }

func (v *domainValue) Type() string { return "LEVEL=NAME,..." }

func (v *domainValue) String() string {
	var parts []string
	for _, l := range [][2]string{{"host", v.p.Host}, {"rack", v.p.Rack}, {"site", v.p.Site}} {
		if l[1] != "" {
			parts = append(parts, l[0]+"="+l[1])
		}
	}
	return strings.Join(parts, ",")
}

func (v *domainValue) Set(s string) error {
	var d Domain
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, name, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q is not LEVEL=NAME", kv)
		}
		switch k {
		case clustermap.LevelHost:
			d.Host = name
		case clustermap.LevelRack:
			d.Rack = name
		case clustermap.LevelSite:
			d.Site = name
		default:
			return fmt.Errorf("unknown level %q (use host, rack, site)", k)
		}
	}
	*v.p = d
	return nil
}
