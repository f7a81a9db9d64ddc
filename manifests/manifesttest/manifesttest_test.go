package manifesttest

import (
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/linefactory/linefactory/manifests"
)

// TestFixturesParse: every fixture that takes no vars is a manifest of
// its kind; a template refuses to be read without its vars.
func TestFixturesParse(t *testing.T) {
	for _, kind := range []string{"jobs", "lines"} {
		entries, err := fs.ReadDir(files, "testdata/"+kind)
		if err != nil || len(entries) == 0 {
			t.Fatalf("%s: %v", kind, err)
		}
		for _, e := range entries {
			name := strings.TrimSuffix(e.Name(), path.Ext(e.Name()))
			data, _ := files.ReadFile("testdata/" + kind + "/" + e.Name())
			if strings.Contains(string(data), "<%") {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s/%s: a template was read without its vars", kind, name)
						}
					}()
					load(kind, name, []map[string]any{{}})
				}()
				continue
			}
			if kind == "jobs" {
				_, err = manifests.ParseJob([]byte(Job(name)), manifests.FormatTOML)
			} else {
				_, err = manifests.ParseLine([]byte(Line(name)), manifests.FormatTOML)
			}
			if err != nil {
				t.Errorf("%s/%s: %v", kind, name, err)
			}
		}
	}
}

// TestTemplateFills: vars fill a template, ranges included, and the
// manifests' own {{param}} placeholders are left alone.
func TestTemplateFills(t *testing.T) {
	src := Job("one-task", map[string]any{"head": "[run]\nfail_fast = false", "tail": "", "steps": []string{`exec = ["echo", "{{who}}"]`, "pause = true"}})
	m, err := manifests.ParseJob([]byte(src), manifests.FormatTOML)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	if steps := m.Run.Tasks[0].Steps; len(steps) != 2 || !strings.Contains(src, "{{who}}") {
		t.Fatalf("steps %+v\n%s", steps, src)
	}
}

func TestOneStepAndOneStage(t *testing.T) {
	for _, step := range []string{"", "named"} {
		m, err := manifests.ParseJob([]byte(OneStepJob("j", step, `["true"]`)), manifests.FormatTOML)
		if err != nil || m.Job.Name != "j" || len(m.Run.Tasks) != 1 || len(m.Run.Tasks[0].Steps) != 1 || m.Run.Tasks[0].Steps[0].Name != step {
			t.Fatalf("step %q: %+v %v", step, m, err)
		}
	}
	l, err := manifests.ParseLine([]byte(OneStageLine("l", Manual, "s", "j")+"max_attempts = 2\n"), manifests.FormatTOML)
	if err != nil || l.Line.Name != "l" || len(l.Stages) != 1 || l.Stages[0].ID != "s" || l.Stages[0].Job != "j" {
		t.Fatalf("%+v %v", l, err)
	}
}
