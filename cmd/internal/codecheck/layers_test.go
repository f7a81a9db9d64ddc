package codecheck

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// layerRule is an import rule of the packages in dir (and its
// subpackages), over imports of the module's own packages (paths relative
// to the module): an import of a forbidden package or its subpackages
// breaks it, and so does, when only is set, an import of anything outside
// the packages only lists (and their subpackages).
type layerRule struct {
	dir    string
	forbid []string
	only   []string
	why    string
}

// layerRules are the one-way imports README "Layout" draws that a change
// is most likely to break.
var layerRules = []layerRule{
	{dir: "workflows", forbid: []string{"store"}, why: "workflows know no storage types"},
	{dir: "api", forbid: []string{"activities"}, why: "api starts runs through its Runs interface and never imports activities"},
	{dir: "manifests", only: []string{"manifests"}, why: "manifests is the pure core: it imports nothing of ours but manifests"},
	{dir: "store", only: []string{"manifests", "store"}, why: "store imports nothing of ours but manifests/..."},
}

// within tells whether pkg is dir or one of its subpackages.
func within(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// breaks is why the import of pkg (relative to the module) breaks rule r;
// "" when it does not.
func (r layerRule) breaks(pkg string) string {
	for _, f := range r.forbid {
		if within(pkg, f) {
			return r.dir + " must not import " + f + " (" + r.why + ")"
		}
	}
	if len(r.only) == 0 {
		return ""
	}
	for _, o := range r.only {
		if within(pkg, o) {
			return ""
		}
	}
	return r.dir + " may import only " + strings.Join(r.only, ", ") + " of ours (" + r.why + ")"
}

// modulePath is the module's path, read from go.mod.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.TrimSpace(mod)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// layerViolations checks one Go source's imports against rule r: one
// "file: import ...: why" per import that breaks it.
func layerViolations(r layerRule, module, file string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, src, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		pkg, ours := strings.CutPrefix(path, module+"/")
		if !ours {
			continue
		}
		if why := r.breaks(pkg); why != "" {
			out = append(out, file+": import "+strconv.Quote(path)+": "+why)
		}
	}
	return out, nil
}

// TestLayersImportOneWay: the non-test Go files of workflows, api,
// manifests and store (with their subpackages) import only what
// layerRules allow.
func TestLayersImportOneWay(t *testing.T) {
	root := repoRoot(t)
	module := modulePath(t, root)
	for _, r := range layerRules {
		checked := 0
		err := filepath.WalkDir(filepath.Join(root, r.dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			bad, err := layerViolations(r, module, filepath.ToSlash(rel), src)
			if err != nil {
				return err
			}
			checked++
			for _, b := range bad {
				t.Error(b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if checked == 0 {
			t.Errorf("no Go file checked under %s: the rule checks nothing", r.dir)
		}
	}
}

// TestLayerRulesCatch: each rule names the file and the import it catches,
// subpackages included, and lets through what it allows.
func TestLayerRulesCatch(t *testing.T) {
	const module = "example.com/m"
	rule := func(dir string) layerRule {
		for _, r := range layerRules {
			if r.dir == dir {
				return r
			}
		}
		t.Fatalf("no rule for %s", dir)
		return layerRule{}
	}
	cases := []struct {
		dir, file, imports string
		bad                []string
	}{
		{"workflows", "workflows/x.go", `"example.com/m/store"; "example.com/m/activities"`, []string{`"example.com/m/store"`}},
		{"workflows", "workflows/x.go", `"example.com/m/store/storetest"`, []string{`"example.com/m/store/storetest"`}},
		{"api", "api/x.go", `"example.com/m/activities/sandbox"; "example.com/m/workflows"; "example.com/m/store"`, []string{`"example.com/m/activities/sandbox"`}},
		{"api", "api/x.go", `"example.com/m/activitiesx"; "fmt"`, nil},
		{"manifests", "manifests/run/x.go", `"example.com/m/manifests"; "example.com/m/store"`, []string{`"example.com/m/store"`}},
		{"store", "store/x.go", `"example.com/m/manifests/run"; "example.com/m/activities"`, []string{`"example.com/m/activities"`}},
	}
	for _, tc := range cases {
		src := "package x\nimport (" + tc.imports + ")\n"
		got, err := layerViolations(rule(tc.dir), module, tc.file, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.bad) {
			t.Errorf("%s importing %s: got %q, want violations of %q", tc.file, tc.imports, got, tc.bad)
			continue
		}
		for i, want := range tc.bad {
			if !strings.HasPrefix(got[i], tc.file+": import "+want+": ") {
				t.Errorf("%s: violation %q does not name the file and %s", tc.file, got[i], want)
			}
		}
	}
}
