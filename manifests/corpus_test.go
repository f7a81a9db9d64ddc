package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loadExampleJobs parses, validates and normalizes every example job.
func loadExampleJobs(t *testing.T) map[string]*JobManifest {
	t.Helper()
	files, err := filepath.Glob("examples/jobs/*/job.*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example jobs found: %v", err)
	}
	formats := map[Format]int{}
	jobs := map[string]*JobManifest{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		format, ok := FormatFromPath(f)
		if !ok {
			t.Fatalf("%s: not a .toml or .json manifest", f)
		}
		formats[format]++
		m, err := ParseJob(data, format)
		if err != nil {
			t.Fatalf("%s: parse: %v", f, err)
		}
		if ps := ValidateJob(m); ps != nil {
			t.Fatalf("%s: invalid:\n%v", f, ps)
		}
		if ps := CheckName("job.name", filepath.Base(filepath.Dir(f)), m.Job.Name); ps != nil {
			t.Fatalf("%s: %v", f, ps)
		}
		NormalizeJob(m)
		jobs[m.Job.Name] = m
	}
	if formats[FormatTOML] == 0 || formats[FormatJSON] == 0 {
		t.Fatalf("example jobs by format: %v; want job.toml and job.json examples", formats)
	}
	return jobs
}

func TestExamplesValidate(t *testing.T) {
	jobs := loadExampleJobs(t)
	lines, _ := filepath.Glob("examples/lines/*")
	if len(lines) == 0 {
		t.Fatal("no example lines found")
	}
	formats := map[Format]int{}
	for _, f := range lines {
		format, ok := FormatFromPath(f)
		formats[format]++
		t.Run(filepath.Base(f), func(t *testing.T) {
			if !ok {
				t.Fatal("not a .toml or .json manifest")
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseLine(data, format)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if ps := ValidateLine(m); ps != nil {
				t.Fatalf("invalid:\n%v", ps)
			}
			ps := CheckLineJobs(m, func(job, _ string) (bool, bool) { _, ok := jobs[job]; return ok, true })
			if ps != nil {
				t.Fatalf("stage jobs:\n%v", ps)
			}
		})
	}
	if formats[FormatTOML] == 0 || formats[FormatJSON] == 0 {
		t.Fatalf("example lines by format: %v; want .toml and .json examples", formats)
	}
}

// TestInvalidCorpus: every file under testdata/invalid fails with exactly
// the problems its wants name: a TOML file's "# want:" header lines, or for a
// JSON file the "# want:" lines of the .want file beside it. Each want must
// be contained in a reported problem and each problem must contain a want, so
// an entry fails on the rule it targets and nothing else.
func TestInvalidCorpus(t *testing.T) {
	for _, kind := range []string{"jobs", "lines"} {
		files, _ := filepath.Glob(filepath.Join("testdata/invalid", kind, "*"))
		formats := map[Format]int{}
		for _, f := range files {
			if filepath.Ext(f) == ".want" {
				if _, err := os.Stat(strings.TrimSuffix(f, ".want") + ".json"); err != nil {
					t.Errorf("%s has no JSON entry beside it", f)
				}
				continue
			}
			format, ok := FormatFromPath(f)
			formats[format]++
			t.Run(kind+"/"+filepath.Base(f), func(t *testing.T) {
				if !ok {
					t.Fatal("not a .toml or .json entry")
				}
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				header := data
				if format == FormatJSON {
					if header, err = os.ReadFile(strings.TrimSuffix(f, ".json") + ".want"); err != nil {
						t.Fatalf("a JSON entry needs a .want file: %v", err)
					}
				}
				want := WantedProblems(header)
				if len(want) == 0 {
					t.Fatal("entry has no '# want:' line")
				}
				ps := ValidateBytes(kind, data, format)
				if ps == nil {
					t.Fatalf("accepted; want %q", want)
				}
				got := ps.Error()
				for _, w := range want {
					if !strings.Contains(got, w) {
						t.Errorf("problems:\n%s\nwant a problem containing %q", got, w)
					}
				}
				for _, p := range ps {
					matched := false
					for _, w := range want {
						matched = matched || strings.Contains(p.String(), w)
					}
					if !matched {
						t.Errorf("unexpected problem %q (wants: %q)", p, want)
					}
				}
			})
		}
		if formats[FormatTOML] < 10 || formats[FormatJSON] < 2 {
			t.Fatalf("invalid corpus for %s by format: %v; want at least 10 TOML and 2 JSON entries", kind, formats)
		}
	}
}

func TestHashSameForTOMLAndJSON(t *testing.T) {
	tomlData, err := os.ReadFile("examples/jobs/hello/job.toml")
	if err != nil {
		t.Fatal(err)
	}
	jsonData, err := os.ReadFile("testdata/hello.json")
	if err != nil {
		t.Fatal(err)
	}
	hash := func(data []byte, f Format) string {
		m, err := ParseJob(data, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		NormalizeJob(m)
		h, err := ContentHash(m)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ht, hj := hash(tomlData, FormatTOML), hash(jsonData, FormatJSON)
	if ht != hj {
		t.Fatalf("TOML hash %s != JSON hash %s", ht, hj)
	}
	if !strings.HasPrefix(ht, "sha256:") || len(ht) != len("sha256:")+64 {
		t.Fatalf("hash %q is not sha256:<hex>", ht)
	}
	// A changed manifest hashes differently; normalizing twice changes nothing.
	m, _ := ParseJob(tomlData, FormatTOML)
	NormalizeJob(m)
	NormalizeJob(m)
	if h, _ := ContentHash(m); h != ht {
		t.Fatalf("normalize is not idempotent: %s != %s", h, ht)
	}
	m.Job.Description = "changed"
	if h, _ := ContentHash(m); h == ht {
		t.Fatal("a changed manifest kept its hash")
	}
}

func TestNormalizeDefaults(t *testing.T) {
	m, err := ParseJob([]byte(`
[job]
name = "d"
[run.sandbox]
image = "img"
[[run.tasks]]
name = "t"
[[run.tasks.steps]]
exec = ["true"]
outputs = ["o"]
[outputs.o]
type = "string"
[schedule]
cron = "0 * * * *"
`), FormatTOML)
	if err != nil {
		t.Fatal(err)
	}
	NormalizeJob(m)
	s := m.Run.Sandbox
	checks := []struct {
		name      string
		got, want any
	}{
		{"fail_fast", *m.Run.FailFast, true},
		{"fanout", *m.Run.Fanout, false},
		{"concurrency", *m.Run.Concurrency, 1},
		{"sandbox.mode", s.Mode, "provision"},
		{"sandbox.vcpus", *s.Vcpus, 2},
		{"sandbox.memory_mb", *s.MemoryMB, 2048},
		{"sandbox.disk_gb", *s.DiskGB, 10},
		{"sandbox.internet_enabled", *s.InternetEnabled, true},
		{"outputs.o.required", *m.Outputs["o"].Required, true},
		{"outputs.o.reduce", m.Outputs["o"].Reduce, "one"},
		{"schedule.timezone", m.Schedule.Timezone, "UTC"},
		{"schedule.enabled", *m.Schedule.Enabled, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
