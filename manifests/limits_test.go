package manifests

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

const deepJobHead = `[job]
name = "deep"

[job.params.p]
type = "array"
`

func deepTOML(form string, n int) string {
	switch form {
	case "arrays":
		return deepJobHead + "default = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n"
	case "inline tables":
		return deepJobHead + "default = " + strings.Repeat("{a = ", n) + "1" + strings.Repeat("}", n) + "\n"
	case "dotted keys":
		return deepJobHead + "default." + strings.TrimSuffix(strings.Repeat("a.", n), ".") + " = 1\n"
	case "table header":
		return deepJobHead + "[job.params.p.default." + strings.TrimSuffix(strings.Repeat("a.", n), ".") + "]\nx = 1\n"
	}
	panic(form)
}

func deepJSON(n int) string {
	return `{"job": {"name": "deep", "params": {"p": {"type": "array", "default": ` +
		strings.Repeat("[", n) + strings.Repeat("]", n) + `}}}}`
}

// TestDeepManifestsBounded: a manifest nested 100,000 deep (about 200 KB) is
// rejected in under a second with under 50 MB allocated, in both formats and
// every TOML nesting form (the TOML decoder is quadratic in nesting: 2,000
// inline tables cost it 6 s and 470 MB; checkShape's paths cost 23 GB at
// 100,000).
func TestDeepManifestsBounded(t *testing.T) {
	const n = 100_000
	cases := map[string]struct {
		doc string
		f   Format
	}{"json": {deepJSON(n), FormatJSON}}
	for _, form := range []string{"arrays", "inline tables", "dotted keys", "table header"} {
		cases["toml "+form] = struct {
			doc string
			f   Format
		}{deepTOML(form, n), FormatTOML}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			data := []byte(tc.doc)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, ps := CheckJob(data, tc.f)
			name := PeekName(data, tc.f, "job")
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			if len(ps) != 1 || !strings.Contains(ps[0].Message, "nesting depth") {
				t.Fatalf("problems = %v, want one about the nesting depth", ps)
			}
			if name != "" {
				t.Errorf("PeekName = %q on a document over the limits, want \"\"", name)
			}
			if took > time.Second {
				t.Errorf("took %v, want < 1s", took)
			}
			if alloc > 50<<20 {
				t.Errorf("allocated %d MB, want < 50 MB", alloc>>20)
			}
			t.Logf("%d bytes rejected in %v with %d KB allocated", len(data), took, alloc>>10)
		})
	}
}

func TestManifestSizeLimit(t *testing.T) {
	doc := deepJobHead + "description = \"" + strings.Repeat("x", MaxManifestBytes) + "\"\n"
	le := CheckSize([]byte(doc), FormatTOML)
	if le == nil || !le.TooLarge || le.Limit != MaxManifestBytes || le.Requested != int64(len(doc)) {
		t.Fatalf("CheckSize = %+v, want too large with limit %d, requested %d", le, MaxManifestBytes, len(doc))
	}
}

// TestDepthCounts: the scanners count nesting as the decoded document nests,
// and what lies inside strings and comments does not count.
func TestDepthCounts(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		f    Format
		want int
	}{
		{"json flat", `{"a": 1}`, FormatJSON, 1},
		{"json nested", `{"a": [[1], {"b": 2}]}`, FormatJSON, 3},
		{"json brackets in strings", `{"a": "[[[{{\"[["}`, FormatJSON, 1},
		{"toml key", "a = 1\n", FormatTOML, 1},
		{"toml dotted", "a.b.c = 1\n", FormatTOML, 3},
		{"toml arrays", "a = [[1], [2]]\n", FormatTOML, 3},
		{"toml inline", "a = {b = {c = 1}}\n", FormatTOML, 3},
		{"toml inline dotted", "a = {b.c = 1, d = [1]}\n", FormatTOML, 3},
		{"toml header", "[a.b]\nc = 1\n", FormatTOML, 3},
		{"toml array of tables", "[[a.b]]\nc = {d = 1}\n", FormatTOML, 5},
		{"toml header resets", "[a.b.c.d]\n[e]\nf = 1\n", FormatTOML, 4},
		{"toml strings", "a = \"[[[{{\\\"\"\nb = '[[['\nc = \"\"\"\n[[[\n\"\"\"\nd = '''[[['''\n", FormatTOML, 1},
		{"toml comments", "a = 1 # [[[[\n# {{{{\n", FormatTOML, 1},
		{"toml quoted keys", "\"a.b\".c = 1\n", FormatTOML, 2},
		{"toml multi-line array", "a = [\n  [1],\n  [2],\n]\nb = 1\n", FormatTOML, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got int
			if tc.f == FormatTOML {
				got = tomlDepth([]byte(tc.doc))
			} else {
				got = jsonDepth([]byte(tc.doc))
			}
			if got != tc.want {
				t.Errorf("depth of %q = %d, want %d", tc.doc, got, tc.want)
			}
		})
	}
}

// TestDepthAtLimit: a default nested just within the limit is accepted, one
// level more is not, with the depth found in the problem.
func TestDepthAtLimit(t *testing.T) {
	head := "[job]\nname = \"d\"\n[job.params.p]\ntype = \"array\"\n"
	// job.params.p.default is depth 4; each array adds one.
	ok := head + "default = " + strings.Repeat("[", MaxDepth-4) + strings.Repeat("]", MaxDepth-4) + "\n"
	if le := CheckSize([]byte(ok), FormatTOML); le != nil {
		t.Fatalf("depth %d rejected: %v", MaxDepth, le)
	}
	over := head + "default = " + strings.Repeat("[", MaxDepth-3) + strings.Repeat("]", MaxDepth-3) + "\n"
	le := CheckSize([]byte(over), FormatTOML)
	if le == nil || le.Limit != MaxDepth || le.Requested != MaxDepth+1 {
		t.Fatalf("CheckSize = %+v, want limit %d requested %d", le, MaxDepth, MaxDepth+1)
	}
}

func TestStepLimits(t *testing.T) {
	steps := func(n int) []Step { return make([]Step, n) }
	cases := []struct {
		name      string
		tasks     []Task
		path      string
		requested int64
	}{
		{"task", []Task{{Steps: steps(MaxStepsPerTask + 1)}}, "run.tasks[0].steps", MaxStepsPerTask + 1},
		{"job", []Task{{Steps: steps(MaxStepsPerJob / 2)}, {Steps: steps(MaxStepsPerJob / 2)}, {Steps: steps(1)}}, "run.tasks", MaxStepsPerJob + 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			le := CheckJobLimits(&JobManifest{Run: RunSection{Tasks: tc.tasks}})
			if le == nil || le.Path != tc.path || le.Requested != tc.requested {
				t.Fatalf("CheckJobLimits = %+v, want %s requested %d", le, tc.path, tc.requested)
			}
		})
	}
	if le := CheckJobLimits(&JobManifest{Run: RunSection{Tasks: []Task{{Steps: steps(MaxStepsPerTask)}}}}); le != nil {
		t.Errorf("a task at the limit: %v", le)
	}
}

func TestLocString(t *testing.T) {
	var root *loc
	l := root.child("run").child("tasks").item(1).child("steps").item(0).item(2)
	if got, want := l.String(), "run.tasks[1].steps[0][2]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := root.String(); got != "" {
		t.Errorf("root renders %q, want \"\"", got)
	}
	_ = fmt.Sprint(l)
}

// TestShapeWalkLinear: the shape walk itself (behind the depth limit) costs
// memory linear in the nesting: a path string per level cost 600 MB at
// depth 20,000 before.
func TestShapeWalkLinear(t *testing.T) {
	const n = 100_000
	var doc any = json.Number("1e999")
	for i := 0; i < n; i++ {
		doc = []any{doc}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var ps Problems
	ok := checkShape(map[string]any{"default": doc}, reflect.TypeOf(JobParamSpec{}), nil, &ps)
	runtime.ReadMemStats(&after)
	if !ok || len(ps) != 1 || !strings.HasPrefix(ps[0].Path, "default[0][0]") || len(ps[0].Path) != len("default")+3*n {
		t.Fatalf("got %d problems (first path %d bytes), want one at default[0]...[0]", len(ps), len(ps[0].Path))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 50<<20 {
		t.Errorf("allocated %d MB, want < 50 MB", alloc>>20)
	}
}

func TestRunHistoryLimit(t *testing.T) {
	m := &JobManifest{Run: RunSection{Tasks: []Task{{Steps: make([]Step, 1000)}}}}
	if le := CheckRunHistory(m, 32<<10); le != nil {
		t.Errorf("1,000 steps with 32 KiB of params: %v", le)
	}
	le := CheckRunHistory(m, 64<<10)
	if le == nil || !le.TooLarge || le.Requested != 1000*64<<10 || le.Limit != MaxRunHistoryBytes {
		t.Errorf("1,000 steps with 64 KiB of params: %+v, want too large", le)
	}
}
