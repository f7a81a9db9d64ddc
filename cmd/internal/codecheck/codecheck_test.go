package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxFuncLines is the longest a function may be outside tests and
// generated code.
const maxFuncLines = 80

// vocabularyDir is the package that owns the run's words.
const vocabularyDir = "manifests/run"

// runWords are literals that belong to the run vocabulary: statuses,
// failure classes and workflow-ID prefixes. The classes "config", "user",
// "agent" and "unknown" are left out: they are common words elsewhere (flag
// names, token names), and the typed class constants cover them.
var runWords = map[string]bool{
	"queued": true, "pending": true, "running": true, "succeeded": true, "failed": true,
	"cancelled": true, "timed_out": true, "skipped": true, "waiting": true,
	"infra": true, "contract": true, "platform": true,
	"jobrun/": true, "linerun/": true, "lineschedule/": true, "jobschedule/": true,
}

// allowedLiterals are occurrences of those words that are not the run's:
// "file.go: literal" with the reason.
var allowedLiterals = map[string]string{
	"activities/sandbox/sandbox.go: running": "a sandbox's state, not a run's",
	"activities/sandbox/sandbox.go: paused":  "a sandbox's state, not a run's",
}

// longFunctions are functions allowed over maxFuncLines, "file.go: Func"
// with the reason; none today. Every entry is a debt, and one that is no
// longer long fails the check.
var longFunctions = map[string]string{}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", dir, err)
	}
	return dir
}

// sources parses every non-test Go file of the repository that is not
// generated.
func sources(t *testing.T) (map[string]*ast.File, *token.FileSet) {
	t.Helper()
	root := repoRoot(t)
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "node_modules", ".factory", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, fset
}

// TestNoLongFunctions: no function (or function literal at top level of a
// declaration) is over maxFuncLines lines.
func TestNoLongFunctions(t *testing.T) {
	files, fset := sources(t)
	stillLong := map[string]bool{}
	for path, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			n := end - start + 1
			if _, ok := longFunctions[path+": "+fn.Name.Name]; ok {
				if n > maxFuncLines {
					stillLong[path+": "+fn.Name.Name] = true
				}
				continue
			}
			if n > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines (max %d): break it into named parts", path, start, fn.Name.Name, n, maxFuncLines)
			}
		}
	}
	for fn := range longFunctions {
		if !stillLong[fn] {
			t.Errorf("%s is allowed to be long but is not (or is gone): remove it from longFunctions", fn)
		}
	}
}

// TestRunVocabularyHasOneHome: run statuses, failure classes and
// workflow-ID prefixes are spelled only in the vocabulary package.
func TestRunVocabularyHasOneHome(t *testing.T) {
	files, fset := sources(t)
	for path, f := range files {
		if strings.HasPrefix(path, vocabularyDir+"/") {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				return false
			case *ast.Field:
				// Struct tags are wire names, not words of the vocabulary.
				return n.Tag == nil
			case *ast.BasicLit:
				if n.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(n.Value)
				if err != nil || !runWords[s] {
					return true
				}
				if _, ok := allowedLiterals[path+": "+s]; ok {
					return true
				}
				t.Errorf("%s:%d: literal %q belongs to the run vocabulary (%s): use its named constant", path, fset.Position(n.Pos()).Line, s, vocabularyDir)
			}
			return true
		})
	}
}
