// Package serverconf is the configuration of `plumeria server`: every
// setting with its default, the TOML config file (`--config FILE`), the
// flags of the same names, and how they combine: defaults, then the file,
// then the flags given explicitly on the command line.
//
// It does no I/O: the caller reads the file and passes its name and bytes.
// Bad input (unknown keys, wrong types, bad values) gets an error that
// names the file or flag and the key; Decode never panics.
//
// Keys in the file are the flag names without the dashes: `--metrics-listen`
// is `metrics-listen = "..."`. A setting added here is a flag and a key at
// once; document it in deploy/plumeria.example.toml and docs/operations.md
// (a test checks both).
package serverconf

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/plumeria-fs/plumeria/clustermap"
	"github.com/plumeria-fs/plumeria/internal/bytesize"
	"github.com/plumeria-fs/plumeria/internal/limits"
	"github.com/plumeria-fs/plumeria/internal/pki"
)

// Config is one server's settings. The toml tag of each field is both its
// key in the file and its flag name.
type Config struct {
	Name          string   `toml:"name"`           // unique name in the cluster; required
	Listen        string   `toml:"listen"`         // HOST:PORT for gRPC and Raft; required
	Advertise     string   `toml:"advertise"`      // HOST:PORT others use; "" = the listen address
	Data          string   `toml:"data"`           // state directory; required
	Coordinator   bool     `toml:"coordinator"`    // run the coordinator role
	Brick         bool     `toml:"brick"`          // run the brick role
	Lock          bool     `toml:"lock"`           // run the lock server role
	Join          []string `toml:"join"`           // coordinators to join; none = bootstrap
	Coord         []string `toml:"coord"`          // coordinators a brick/lock server reports to; none = join
	Domain        Domain   `toml:"domain"`         // failure domains
	Capacity      string   `toml:"capacity"`       // brick capacity, e.g. "100GiB"; "" = free space of data
	Class         string   `toml:"class"`          // brick storage class, e.g. "ssd"; "" = "default"
	MetricsListen string   `toml:"metrics-listen"` // HOST:PORT for Prometheus /metrics; "" = none
	// MetricsInsecure serves the HTTP port over TLS without requiring a
	// client certificate.
	MetricsInsecure bool   `toml:"metrics-insecure"`
	Certs           string `toml:"certs"`    // certs directory (plumeria init); "" = $PLUMERIA_CERTS
	Insecure        bool   `toml:"insecure"` // no TLS at all
	// Token is a join token (plumeria token create): without a certs
	// directory, the server gets its certificate from a coordinator with
	// it, once, and keeps it in DATA/tls.
	Token string `toml:"token"`
	// CertLifetime is the lifetime of the certificates a coordinator
	// issues to nodes that join or renew, e.g. "720h"; "" = a year.
	CertLifetime string `toml:"cert-lifetime"`
	LogLevel     string `toml:"log-level"` // debug, info, warn or error
}

// Domain is where a server sits; replicas of a placement group go to
// distinct hosts, and are spread over racks and sites when possible.
type Domain struct {
	Host string `toml:"host"` // "" = the machine's hostname (see Resolve)
	Rack string `toml:"rack"`
	Site string `toml:"site"`
}

// Map returns the levels that are set, as clustermap and node want them.
func (d Domain) Map() map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{clustermap.LevelHost: d.Host, clustermap.LevelRack: d.Rack, clustermap.LevelSite: d.Site} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// Defaults returns the settings used when neither the file nor a flag sets them.
func Defaults() Config { return Config{LogLevel: "info"} }

// Keys lists every setting's key (and flag name), in the order of Config.
func Keys() []string {
	t := reflect.TypeFor[Config]()
	keys := make([]string, t.NumField())
	for i := range keys {
		keys[i] = t.Field(i).Tag.Get("toml")
	}
	return keys
}

// field returns c's field for key.
func field(c *Config, key string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("toml") == key {
			return v.Field(i)
		}
	}
	panic(fmt.Sprintf("serverconf: no key %q", key)) // callers pass keys from Keys or from the flag set Bind made
}

// KeyError is a bad value for one setting.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }

// Decode reads a config file (name is for messages only). Keys the file
// leaves out keep their defaults. Unknown keys, wrong types and bad values
// are errors naming the file and the key.
func Decode(name string, data []byte) (Config, error) {
	c := Defaults()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %s", name, strings.TrimPrefix(err.Error(), "toml: "))
	}
	if un := md.Undecoded(); len(un) > 0 {
		key := un[0].String()
		where := ""
		if line := lineOf(data, un[0][len(un[0])-1]); line > 0 {
			where = fmt.Sprintf("line %d: ", line)
		}
		return Config{}, fmt.Errorf("config %s: %sunknown key %q (known keys: %s; domain has host, rack, site)", name, where, key, strings.Join(Keys(), ", "))
	}
	c.normalize()
	if err := c.Check(); err != nil {
		return Config{}, fmt.Errorf("config %s: %w", name, err)
	}
	return c, nil
}

// lineOf finds the first line that defines key or opens table key (best
// effort, for messages), or 0.
func lineOf(data []byte, key string) int {
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		for _, k := range []string{key, strconv.Quote(key), "'" + key + "'"} {
			if rest, ok := strings.CutPrefix(l, k); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
				return i + 1
			}
			if t := strings.Trim(l, "[] \t"); t == k && strings.HasPrefix(l, "[") {
				return i + 1
			}
		}
	}
	return 0
}

// normalize makes empty lists nil, so that a config decoded from its own
// encoding equals itself.
func (c *Config) normalize() {
	if len(c.Join) == 0 {
		c.Join = nil
	}
	if len(c.Coord) == 0 {
		c.Coord = nil
	}
}

// Encode prints c as a config file that Decode reads back to c. Every key
// is present, empty ones too, so the output shows all settings.
func Encode(c Config) []byte {
	if c.Join == nil {
		c.Join = []string{}
	}
	if c.Coord == nil {
		c.Coord = []string{}
	}
	var b bytes.Buffer
	b.WriteString("# plumeria server configuration (keys: docs/operations.md, deploy/plumeria.example.toml)\n")
	if err := toml.NewEncoder(&b).Encode(c); err != nil {
		panic(fmt.Sprintf("serverconf: encode: %v", err)) // strings, bools and lists of strings always encode
	}
	return b.Bytes()
}

// Override returns base with the keys in set taken from flags, checking
// each (errors name the flag).
func Override(base, flags Config, set []string) (Config, error) {
	out := base
	for _, key := range set {
		field(&out, key).Set(field(&flags, key))
		if err := checkKey(&out, key); err != nil {
			return Config{}, fmt.Errorf("--%w", err)
		}
	}
	out.normalize()
	return out, nil
}

// Resolve fills the defaults that depend on the machine: the host domain
// is the hostname unless set.
func (c Config) Resolve(hostname string) Config {
	if c.Domain.Host == "" {
		c.Domain.Host = hostname
	}
	return c
}

// Check reports the first setting with a bad value, as a *KeyError.
// Missing required settings are Complete's business.
func (c Config) Check() error {
	for _, key := range Keys() {
		if err := checkKey(&c, key); err != nil {
			return err
		}
	}
	return nil
}

// ErrIncomplete means a required setting or a role is missing.
var ErrIncomplete = errors.New("incomplete settings")

// Complete checks that c can run a server: name, listen and data are set
// and at least one role is on. Errors wrap ErrIncomplete.
func (c Config) Complete() error {
	var missing []string
	for _, kv := range [][2]string{{"name", c.Name}, {"listen", c.Listen}, {"data", c.Data}} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: set %s (flags --%s, or keys in --config FILE)", ErrIncomplete, strings.Join(missing, ", "), strings.Join(missing, ", --"))
	}
	if !c.Coordinator && !c.Brick && !c.Lock {
		return fmt.Errorf("%w: give at least one role: coordinator, brick and/or lock", ErrIncomplete)
	}
	if c.Certs == "" && !c.Insecure && c.Token == "" {
		return fmt.Errorf("%w: no certificates: run `plumeria init --certs DIR` once and give --certs DIR (or PLUMERIA_CERTS=DIR, or key certs), or --insecure to run without TLS", ErrIncomplete)
	}
	if c.Token != "" && c.Insecure {
		return fmt.Errorf("%w: both token and insecure are set: choose one", ErrIncomplete)
	}
	if c.Certs != "" && c.Insecure {
		return fmt.Errorf("%w: both certs %q and insecure are set: choose one", ErrIncomplete, c.Certs)
	}
	return nil
}

// CapacityBytes returns the capacity in bytes (0: use free space). Check
// has accepted it already.
func (c Config) CapacityBytes() int64 {
	n, _ := bytesize.ParseInt64(c.Capacity)
	return n
}

// CertLifetimeDuration returns cert-lifetime (0: the default). Check has
// accepted it already.
func (c Config) CertLifetimeDuration() time.Duration {
	d, _ := time.ParseDuration(c.CertLifetime)
	return d
}

// SlogLevel returns the log level. Check has accepted it already.
func (c Config) SlogLevel() slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.LogLevel))
	return l
}

func checkKey(c *Config, key string) error {
	var err error
	switch key {
	case "name":
		if c.Name != "" {
			err = clustermap.ValidName(c.Name)
		}
	case "listen", "advertise", "metrics-listen":
		err = checkAddr(field(c, key).String(), key == "listen" || key == "metrics-listen")
	case "data", "certs":
		if strings.ContainsRune(field(c, key).String(), 0) {
			err = errors.New("contains a NUL byte")
		}
	case "join", "coord":
		for _, a := range field(c, key).Interface().([]string) {
			if err = checkAddr(a, false); err != nil {
				break
			}
		}
	case "domain":
		err = checkDomain(c.Domain)
	case "capacity":
		_, err = bytesize.ParseInt64(c.Capacity)
	case "class":
		if c.Class != "" {
			err = clustermap.ValidClass(c.Class)
		}
	case "token":
		if c.Token != "" {
			_, err = pki.ParseToken(c.Token)
		}
	case "cert-lifetime":
		if c.CertLifetime != "" {
			var d time.Duration
			if d, err = time.ParseDuration(c.CertLifetime); err == nil && (d < time.Second || d > pki.LeafLifetime) {
				err = fmt.Errorf("%v is outside 1s..%v", d, pki.LeafLifetime)
			}
		}
	case "log-level":
		var l slog.Level
		if uerr := l.UnmarshalText([]byte(c.LogLevel)); uerr != nil || c.LogLevel == "" {
			err = fmt.Errorf("%q is not a level (use debug, info, warn or error)", c.LogLevel)
		}
	}
	if err != nil {
		return &KeyError{Key: key, Err: err}
	}
	return nil
}

// checkAddr accepts "" and HOST:PORT with a numeric port; an empty host
// (all interfaces) only where the address is listened on.
func checkAddr(a string, listen bool) error {
	if a == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 && !listen {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", a, port)
	}
	if host == "" && !listen {
		return fmt.Errorf("%q: give a host others can reach", a)
	}
	return nil
}

// checkDomain accepts any printable name of at most limits.NameBytesMax
// bytes per level (names are only compared).
func checkDomain(d Domain) error {
	for _, l := range [][2]string{{"host", d.Host}, {"rack", d.Rack}, {"site", d.Site}} {
		v := l[1]
		if len(v) > limits.NameBytesMax {
			return fmt.Errorf("%s: %q is longer than %d bytes", l[0], v, limits.NameBytesMax)
		}
		for _, r := range v {
			if !unicode.IsPrint(r) || r == ',' || r == '=' {
				return fmt.Errorf("%s: %q: character %q not allowed", l[0], v, r)
			}
		}
	}
	return nil
}
