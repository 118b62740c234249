// Package archtest checks the layering rules of STYLE.md §2: the pure
// decision packages do no I/O and read no clock, and imports point down.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/plumeria-fs/plumeria"

// pure packages: no network, no files, no wall clock, no global randomness.
var pure = []string{"clustermap", "brick/repl", "brick/ec", "lock", "filesys/layout", "filesys/dir", "filesys/redo", "filesys/acl"}

var forbiddenImports = []string{"net", "os", "os/exec", "syscall", "net/http"}

func TestPurePackagesDoNoIO(t *testing.T) {
	for _, pkg := range pure {
		out, err := exec.Command("go", "list", "-deps", "-test=false", module+"/"+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, bad := range forbiddenImports {
				if dep == bad && directlyImports(t, pkg, bad) {
					t.Errorf("%s imports %s", pkg, bad)
				}
			}
		}
		checkCalls(t, pkg)
	}
}

// directlyImports reports whether a non-test file of pkg imports path.
func directlyImports(t *testing.T, pkg, path string) bool {
	found := false
	eachFile(t, pkg, func(f *ast.File) {
		for _, im := range f.Imports {
			if strings.Trim(im.Path.Value, `"`) == path {
				found = true
			}
		}
	})
	return found
}

// checkCalls rejects time.Now, time.Since, time.Sleep and top-level
// math/rand calls in pkg's non-test files.
func checkCalls(t *testing.T, pkg string) {
	eachFile(t, pkg, func(f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			id, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch {
			case id.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Sleep" || sel.Sel.Name == "After"):
				t.Errorf("%s calls time.%s: pure packages take time as ticks", pkg, sel.Sel.Name)
			case id.Name == "rand" && sel.Sel.Name != "Rand" && sel.Sel.Name != "New" && sel.Sel.Name != "NewPCG" && sel.Sel.Name != "Source":
				t.Errorf("%s calls rand.%s: randomness comes in through Config", pkg, sel.Sel.Name)
			}
			return true
		})
	})
}

func eachFile(t *testing.T, pkg string, fn func(*ast.File)) {
	t.Helper()
	dir := filepath.Join("..", "..", pkg)
	fset := token.NewFileSet()
	full, err := parser.ParseDir(fset, dir, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", dir, err)
	}
	for _, p := range full {
		for name, f := range p.Files {
			if !strings.HasSuffix(name, "_test.go") {
				fn(f)
			}
		}
	}
}

// TestFilesysDeclaresItsDevice: the file system and its parts depend only
// on the interfaces filesys declares (Device, Locker), not on the volume
// client that package node adapts to them (STYLE.md §2).
func TestFilesysDeclaresItsDevice(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/filesys/...").Output()
	if err != nil {
		t.Fatalf("go list filesys/...: %v", err)
	}
	pkgs := strings.Fields(string(out))
	for _, want := range []string{"filesys", "filesys/redo", "filesys/layout", "filesys/fsck"} {
		if !slices.Contains(pkgs, module+"/"+want) {
			t.Errorf("go list filesys/... misses %s", want)
		}
	}
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "list", "-deps", "-test=false", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"/volume" || strings.HasPrefix(dep, module+"/volume/") {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
}
