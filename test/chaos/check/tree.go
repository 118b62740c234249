package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The crash-point workload: one node changes a directory tree, one
// operation at a time, and is killed at a random point. Its redo log is
// one sequence and recovery replays whole records, so the recovered tree
// must be the tree after some prefix of the operations, and that prefix
// must hold every operation that returned before the last fsync that
// returned (§9.1: metadata changes whose call returned before an fsync
// survive; §9.3: no partial state). Only the operation in flight at the
// kill may be half done, and only a data write can be: its file then
// holds a prefix of the data.
//
// Files are written once, right after they are created (data is not
// logged, so overwriting data in place would not follow the prefix rule).

// TreeOp is one operation of the crash-point workload. Paths are relative
// to the workload's directory, with '/' separators.
type TreeOp struct {
	Kind    string // mkdir rmdir create write rename link symlink unlink chmod truncate fsync
	Path    string
	To      string // rename and link: the new name
	Data    string // write: the file's content; symlink: the target
	Mode    uint32 // mkdir, create, chmod: permission bits
	Size    int    // truncate: new size (never larger)
	Outcome Outcome
	Err     string
}

func (o TreeOp) String() string {
	s := o.Kind + " " + o.Path
	switch o.Kind {
	case "rename", "link":
		s += " -> " + o.To
	case "write":
		s += fmt.Sprintf(" (%d bytes)", len(o.Data))
	case "symlink":
		s += " -> " + o.Data
	case "mkdir", "create", "chmod":
		s += fmt.Sprintf(" %#o", o.Mode)
	case "truncate":
		s += fmt.Sprintf(" to %d", o.Size)
	}
	s += " " + o.Outcome.String()
	if o.Err != "" {
		s += ": " + o.Err
	}
	return s
}

// Entry is what a snapshot records of one name.
type Entry struct {
	Kind byte   // 'd' directory, 'f' regular file, 'l' symlink
	Data string // file content or symlink target
	Mode uint32 // permission bits (0 for symlinks)
	Link string // files with several names: the smallest of them; else ""
}

// Snapshot is a tree as names → entries (the root not included).
type Snapshot map[string]Entry

type inode struct {
	kind   byte
	data   string
	mode   uint32
	closed string // a file's data at its last close (create, write)
}

// Tree is the model: names → inode numbers → inodes.
type Tree struct {
	names map[string]int
	nodes map[int]*inode
	next  int
}

// NewTree returns an empty tree.
func NewTree() *Tree { return &Tree{names: map[string]int{}, nodes: map[int]*inode{}} }

// Has reports whether name exists; Kind returns its kind (0 if missing).
func (t *Tree) Has(name string) bool { _, ok := t.names[name]; return ok }

func (t *Tree) Kind(name string) byte {
	if n, ok := t.names[name]; ok {
		return t.nodes[n].kind
	}
	return 0
}

// Names returns every name, sorted.
func (t *Tree) Names() []string { return slices.Sorted(maps.Keys(t.names)) }

// Children returns the names directly inside dir ("" for the root).
func (t *Tree) Children(dir string) []string {
	var out []string
	for name := range t.names {
		if parent(name) == dir {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Links returns how many names the inode behind name has.
func (t *Tree) Links(name string) int {
	n, ok := t.names[name]
	if !ok {
		return 0
	}
	c := 0
	for _, m := range t.names {
		if m == n {
			c++
		}
	}
	return c
}

// Size returns the length of a file's data.
func (t *Tree) Size(name string) int {
	if n, ok := t.names[name]; ok {
		return len(t.nodes[n].data)
	}
	return 0
}

func parent(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return ""
}

// Apply changes the tree as op does, or returns why op is not valid in
// the tree (the workload only issues valid operations).
func (t *Tree) Apply(op TreeOp) error {
	needParent := func(name string) error {
		if p := parent(name); p != "" && t.Kind(p) != 'd' {
			return fmt.Errorf("%s: parent %s is not a directory", op.Kind, p)
		}
		if t.Has(name) {
			return fmt.Errorf("%s: %s exists", op.Kind, name)
		}
		return nil
	}
	add := func(name string, ino *inode) {
		t.next++
		t.nodes[t.next] = ino
		t.names[name] = t.next
	}
	switch op.Kind {
	case "mkdir", "create", "symlink":
		if err := needParent(op.Path); err != nil {
			return err
		}
		switch op.Kind {
		case "mkdir":
			add(op.Path, &inode{kind: 'd', mode: op.Mode})
		case "create":
			add(op.Path, &inode{kind: 'f', mode: op.Mode})
		default:
			add(op.Path, &inode{kind: 'l', data: op.Data})
		}
	case "write":
		if t.Kind(op.Path) != 'f' || t.Size(op.Path) != 0 {
			return fmt.Errorf("write: %s is not an empty file", op.Path)
		}
		ino := t.nodes[t.names[op.Path]]
		ino.data, ino.closed = op.Data, op.Data // open, write, close
	case "truncate":
		if t.Kind(op.Path) != 'f' || t.Size(op.Path) < op.Size {
			return fmt.Errorf("truncate: %s is not a file of at least %d bytes", op.Path, op.Size)
		}
		ino := t.nodes[t.names[op.Path]]
		ino.data = ino.data[:op.Size]
	case "chmod":
		if k := t.Kind(op.Path); k != 'f' && k != 'd' {
			return fmt.Errorf("chmod: no file or directory %s", op.Path)
		}
		t.nodes[t.names[op.Path]].mode = op.Mode
	case "link":
		if t.Kind(op.Path) != 'f' {
			return fmt.Errorf("link: %s is not a file", op.Path)
		}
		if err := needParent(op.To); err != nil {
			return err
		}
		t.names[op.To] = t.names[op.Path]
	case "unlink":
		if k := t.Kind(op.Path); k != 'f' && k != 'l' {
			return fmt.Errorf("unlink: %s is not a file or symlink", op.Path)
		}
		t.drop(op.Path)
	case "rmdir":
		if t.Kind(op.Path) != 'd' || len(t.Children(op.Path)) > 0 {
			return fmt.Errorf("rmdir: %s is not an empty directory", op.Path)
		}
		t.drop(op.Path)
	case "rename":
		return t.rename(op.Path, op.To)
	case "fsync":
		if !t.Has(op.Path) {
			return fmt.Errorf("fsync: no %s", op.Path)
		}
		if ino := t.nodes[t.names[op.Path]]; ino.kind == 'f' {
			ino.closed = ino.data // opened, fsync'd, closed: a version
		}
	default:
		return fmt.Errorf("unknown operation %q", op.Kind)
	}
	return nil
}

func (t *Tree) drop(name string) {
	n := t.names[name]
	delete(t.names, name)
	for _, m := range t.names {
		if m == n {
			return
		}
	}
	delete(t.nodes, n)
}

// rename moves from to to, replacing a file or an empty directory of the
// same kind at to, as rename(2) does.
func (t *Tree) rename(from, to string) error {
	k := t.Kind(from)
	if k == 0 {
		return fmt.Errorf("rename: no %s", from)
	}
	if p := parent(to); p != "" && t.Kind(p) != 'd' {
		return fmt.Errorf("rename: parent of %s is not a directory", to)
	}
	if to == from || strings.HasPrefix(to+"/", from+"/") {
		return fmt.Errorf("rename: %s into itself", from)
	}
	if tk := t.Kind(to); tk != 0 {
		switch {
		case (tk == 'd') != (k == 'd'):
			return fmt.Errorf("rename: %s and %s differ in kind", from, to)
		case tk == 'd' && len(t.Children(to)) > 0:
			return fmt.Errorf("rename: %s is not empty", to)
		case t.names[to] == t.names[from]:
			return fmt.Errorf("rename: %s and %s are the same file", from, to)
		}
		t.drop(to)
	}
	for _, name := range t.Names() {
		if name == from || strings.HasPrefix(name, from+"/") {
			t.names[to+name[len(from):]] = t.names[name]
			delete(t.names, name)
		}
	}
	return nil
}

// Snapshot returns the tree's canonical form.
func (t *Tree) Snapshot() Snapshot {
	groups := map[int][]string{}
	for name, n := range t.names {
		groups[n] = append(groups[n], name)
	}
	s := Snapshot{}
	for name, n := range t.names {
		ino := t.nodes[n]
		e := Entry{Kind: ino.kind, Data: ino.data, Mode: ino.mode}
		if ino.kind == 'l' {
			e.Mode = 0
		}
		if g := groups[n]; ino.kind == 'f' && len(g) > 1 {
			e.Link = slices.Min(g)
		}
		s[name] = e
	}
	return s
}

// Past returns what a file system that keeps file versions shows of the
// tree at a time after these operations (MNT/.plumeria/at/T): each file
// as its last close left it (a truncate without a close is not a
// version), no symlinks (one removed since is not kept), and no modes
// (the view shows a version's mode as it is allowed now).
func (t *Tree) Past() Snapshot {
	s := t.Snapshot()
	for name, e := range s {
		switch e.Kind {
		case 'l':
			delete(s, name)
			continue
		case 'f':
			e.Data = t.nodes[t.names[name]].closed
		}
		e.Mode = 0
		s[name] = e
	}
	return s
}

// PastOf is Past's normal form of a tree read from such a view: no
// symlinks, no modes.
func PastOf(got Snapshot) Snapshot {
	out := Snapshot{}
	for name, e := range got {
		if e.Kind == 'l' {
			continue
		}
		e.Mode = 0
		out[name] = e
	}
	return out
}

// Diff lists up to max differences of got from want, one per line.
// partial names a file whose data may be any prefix of want's (the write
// in flight at the crash); "" for none.
func Diff(want, got Snapshot, partial string, max int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w := want[name]
		g, ok := got[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("missing %s (%c)", name, w.Kind))
		case g.Kind != w.Kind:
			out = append(out, fmt.Sprintf("%s: kind %c, want %c", name, g.Kind, w.Kind))
		case g.Data != w.Data && !(name == partial && strings.HasPrefix(w.Data, g.Data)):
			i := 0
			for i < len(g.Data) && i < len(w.Data) && g.Data[i] == w.Data[i] {
				i++
			}
			out = append(out, fmt.Sprintf("%s: %d bytes, want %d; from byte %d: %q…, want %q…", name, len(g.Data), len(w.Data), i,
				clip(g.Data[i:], 24), clip(w.Data[i:], 24)))
		case g.Mode != w.Mode:
			out = append(out, fmt.Sprintf("%s: mode %#o, want %#o", name, g.Mode, w.Mode))
		case g.Link != w.Link:
			out = append(out, fmt.Sprintf("%s: hard-linked with %q, want %q", name, g.Link, w.Link))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			out = append(out, fmt.Sprintf("extra %s (%c)", name, got[name].Kind))
		}
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("… and %d more", len(out)-max))
	}
	return out
}

// Recovered checks a tree recovered after a crash against the workload's
// operations: ops were issued in order, all OK except perhaps the last
// (in flight at the kill). synced is how many of the first operations
// returned before the last fsync that returned. It returns the prefix
// length that matches, or an anomaly showing the closest candidate.
func Recovered(ops []TreeOp, synced int, got Snapshot) (int, *Anomaly) {
	t := NewTree()
	bestK, best := -1, []string(nil)
	for k := 0; k <= len(ops); k++ {
		if k > 0 {
			if err := t.Apply(ops[k-1]); err != nil {
				return -1, &Anomaly{Kind: "workload", Key: ops[k-1].Path, Detail: fmt.Sprintf("operation %d is not valid in the model: %v", k-1, err)}
			}
		}
		if k < synced {
			continue
		}
		partial := ""
		if k == len(ops) && k > 0 && ops[k-1].Kind == "write" && ops[k-1].Outcome != OK {
			partial = ops[k-1].Path
		}
		d := Diff(t.Snapshot(), got, partial, 20)
		if len(d) == 0 {
			return k, nil
		}
		if best == nil || len(d) < len(best) {
			bestK, best = k, d
		}
	}
	lines := strings.Join(best, "\n    ")
	return -1, &Anomaly{Kind: "recovered tree", Key: "crash point",
		Detail: fmt.Sprintf("the recovered tree is not the tree after any prefix of the %d operations that keeps the %d before the last fsync; closest is the prefix of %d operations, which differs:\n    %s",
			len(ops), synced, bestK, lines)}
}
