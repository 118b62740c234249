package serverconf

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestDecodeGood(t *testing.T) {
	in := `
name = "n1"
listen = "127.0.0.1:7001"
data = "/var/lib/plumeria"
coordinator = true
brick = true
join = ["10.0.0.2:7001", "h3:7001"]
capacity = "100GiB"
metrics-listen = ":9100"
certs = "/etc/plumeria/certs"
log-level = "debug"
[domain]
host = "h1"
rack = "r1"
`
	c, err := Decode("p.toml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Name: "n1", Listen: "127.0.0.1:7001", Data: "/var/lib/plumeria", Coordinator: true, Brick: true,
		Join: []string{"10.0.0.2:7001", "h3:7001"}, Domain: Domain{Host: "h1", Rack: "r1"}, Capacity: "100GiB",
		MetricsListen: ":9100", Certs: "/etc/plumeria/certs", LogLevel: "debug"}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Decode = %+v\nwant     %+v", c, want)
	}
	if err := c.Complete(); err != nil {
		t.Fatal(err)
	}
	if c.CapacityBytes() != 100<<30 {
		t.Errorf("CapacityBytes = %d", c.CapacityBytes())
	}
	if got := c.Domain.Map(); !reflect.DeepEqual(got, map[string]string{"host": "h1", "rack": "r1"}) {
		t.Errorf("Domain.Map = %v", got)
	}
}

func TestDecodeEmptyIsDefaults(t *testing.T) {
	c, err := Decode("empty.toml", nil)
	if err != nil || !reflect.DeepEqual(c, Defaults()) {
		t.Fatalf("Decode(empty) = %+v, %v; want the defaults", c, err)
	}
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "name, listen, data") {
		t.Errorf("Complete(defaults) = %v, want ErrIncomplete naming name, listen, data", err)
	}
	c.Name, c.Listen, c.Data = "a", ":1", "/d"
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "role") {
		t.Errorf("Complete(no role) = %v, want ErrIncomplete about roles", err)
	}
	c.Brick = true
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "plumeria init") || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("Complete(no certs) = %v, want ErrIncomplete telling to run plumeria init or pass --insecure", err)
	}
	c.Insecure = true
	if err := c.Complete(); err != nil {
		t.Errorf("Complete(insecure) = %v", err)
	}
	c.Certs = "/c"
	if err := c.Complete(); !errors.Is(err, ErrIncomplete) {
		t.Errorf("Complete(certs and insecure) = %v", err)
	}
}

// TestDecodeBad: every kind of bad input gets an error naming the file
// and what is wrong, never a panic.
func TestDecodeBad(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"unknown key", "name = \"a\"\nlisten_addr = \"x\"\n", []string{"bad.toml", `unknown key "listen_addr"`, "line 2"}},
		{"unknown table", "[server]\ncapacity = \"1GiB\"\n", []string{"bad.toml", `unknown key "server"`, "line 1"}},
		{"table for a value", "[brick]\ncapacity = \"1GiB\"\n", []string{"bad.toml", "brick", "incompatible types"}},
		{"unknown domain level", "[domain]\nzone = \"z1\"\n", []string{"bad.toml", `unknown key "domain.zone"`}},
		{"wrong type", "coordinator = \"yes\"\n", []string{"bad.toml", "line 1", "coordinator", "incompatible types"}},
		{"list as string", "join = \"10.0.0.1:7001\"\n", []string{"bad.toml", "join", "incompatible types"}},
		{"syntax", "name = \"a\n", []string{"bad.toml", "line 1"}},
		{"duplicate", "name = \"a\"\nname = \"b\"\n", []string{"bad.toml", "line 2", "name"}},
		{"bad name", "name = \"-x\"\n", []string{"bad.toml", "name:", "not allowed"}},
		{"bad listen", "listen = \"7001\"\n", []string{"bad.toml", "listen:", "HOST:PORT"}},
		{"bad port", "listen = \"h:70000\"\n", []string{"bad.toml", "listen:", "port"}},
		{"join without host", "join = [\":7001\"]\n", []string{"bad.toml", "join:", "host"}},
		{"join port 0", "join = [\"h:0\"]\n", []string{"bad.toml", "join:", "port"}},
		{"bad capacity", "capacity = \"lots\"\n", []string{"bad.toml", "capacity:", "not a size"}},
		{"bad log level", "log-level = \"loud\"\n", []string{"bad.toml", "log-level:", "loud"}},
		{"empty log level", "log-level = \"\"\n", []string{"bad.toml", "log-level:"}},
		{"bad domain", "[domain]\nhost = \"a=b\"\n", []string{"bad.toml", "domain: host:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("bad.toml", []byte(tc.in))
			if err == nil {
				t.Fatalf("Decode(%q) succeeded, want an error", tc.in)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

// TestFlagsOverrideFile: only flags given on the command line override the
// file; the others keep the file's values (or the defaults).
func TestFlagsOverrideFile(t *testing.T) {
	file, err := Decode("f.toml", []byte("name = \"f\"\nlisten = \"h:1\"\nlog-level = \"warn\"\njoin = [\"a:1\"]\n[domain]\nhost = \"hf\"\nrack = \"rf\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	var flags Config = Defaults()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	Bind(fs, &flags)
	if err := fs.Parse([]string{"--listen", "h:2", "--brick", "--join", "b:1, c:1", "--domain", "host=hx"}); err != nil {
		t.Fatal(err)
	}
	got, err := Override(file, flags, Given(fs))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Name: "f", Listen: "h:2", Brick: true, Join: []string{"b:1", "c:1"}, Domain: Domain{Host: "hx"}, LogLevel: "warn"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Override = %+v\nwant       %+v", got, want)
	}
	if r := got.Resolve("machine"); r.Domain.Host != "hx" {
		t.Errorf("Resolve replaced a given host: %+v", r.Domain)
	}
	if r := (Config{}).Resolve("machine"); r.Domain.Host != "machine" {
		t.Errorf("Resolve did not default the host: %+v", r.Domain)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "loud"}, "--log-level: "},
		{[]string{"--capacity", "1XB"}, "--capacity: "},
		{[]string{"--coord", "nohost"}, "--coord: "},
		{[]string{"--name", "a b"}, "--name: "},
	} {
		flags := Defaults()
		fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
		Bind(fs, &flags)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if _, err := Override(Defaults(), flags, Given(fs)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want prefix %q", tc.args, err, tc.want)
		}
	}
	for _, bad := range []string{"rack", "zone=z", "host="} {
		var c Config
		fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
		Bind(fs, &c)
		if err := fs.Parse([]string{"--domain", bad}); err == nil {
			t.Errorf("--domain %s accepted", bad)
		}
	}
}

// TestEveryKeyIsAFlag: Bind defines exactly the keys, and the defaults
// of the flags are the defaults of the file.
func TestEveryKeyIsAFlag(t *testing.T) {
	c := Defaults()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	Bind(fs, &c)
	n := 0
	fs.VisitAll(func(*pflag.Flag) { n++ })
	if n != len(Keys()) {
		t.Errorf("%d flags for %d keys", n, len(Keys()))
	}
	for _, k := range Keys() {
		if fs.Lookup(k) == nil || usage[k] == "" {
			t.Errorf("key %s has no flag or no usage", k)
		}
	}
	if err := fs.Parse(nil); err != nil || !reflect.DeepEqual(c, Defaults()) {
		t.Errorf("flags without arguments give %+v, want the defaults", c)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, c := range []Config{
		Defaults(),
		{Name: "n", Listen: "[::1]:7001", Data: "/d \"q\" \\ é", Lock: true, Coord: []string{"a:1"}, Join: []string{"b:2", "c:3"},
			Domain: Domain{Host: "h", Rack: "r", Site: "s"}, Capacity: "1TiB", LogLevel: "error", Advertise: "x:1", MetricsListen: ":0"},
	} {
		b := Encode(c)
		got, err := Decode("printed", b)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)): %v\n%s", c, err, b)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip changed %+v into %+v\n%s", c, got, b)
		}
		for _, k := range Keys() {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k) + ` = |^\[` + k + `\]`).Match(b) {
				t.Errorf("Encode leaves out key %s:\n%s", k, b)
			}
		}
	}
}

// TestExampleFileAndDocs: deploy/plumeria.example.toml decodes, names
// every key (set or commented out), and its commented-out lines decode too;
// docs/operations.md documents every key.
func TestExampleFileAndDocs(t *testing.T) {
	b, err := os.ReadFile("../../deploy/plumeria.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode("plumeria.example.toml", b); err != nil {
		t.Fatal(err)
	}
	uncommented := regexp.MustCompile(`(?m)^# ([a-z-]+ = )`).ReplaceAll(b, []byte("$1"))
	if _, err := Decode("plumeria.example.toml (uncommented)", uncommented); err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys() {
		if !regexp.MustCompile(`(?m)^(# )?` + regexp.QuoteMeta(k) + ` = |^\[` + k + `\]`).Match(b) {
			t.Errorf("the example file does not show key %s", k)
		}
		if !strings.Contains(string(docs), "`"+k+"`") {
			t.Errorf("docs/operations.md does not document key `%s`", k)
		}
	}
}

// FuzzDecode: Decode never panics; what it accepts passes Check and
// encodes to a file that decodes to the same config.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"", "name = \"a\"\n", "join = [\"a:1\", \"b:2\"]\n[domain]\nhost = \"h\"\n", "coordinator = true\nlog-level = \"debug\"\n",
		"capacity = \"1GiB\"\nlisten = \":0\"\n", "x = 1", "[domain]\nzone = 1", "name = 5", "a.b.c = 1", "[[join]]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Decode("fuzz.toml", data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") && !strings.Contains(string(data), "\n") {
				t.Fatalf("multi-line error for one-line input: %q", err)
			}
			return
		}
		if err := c.Check(); err != nil {
			t.Fatalf("Decode accepted a config Check rejects: %v", err)
		}
		again, err := Decode("encoded", Encode(c))
		if err != nil {
			t.Fatalf("Decode(Encode(c)): %v\n%s", err, Encode(c))
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip changed %+v into %+v", c, again)
		}
	})
}
