// Package manifesttest holds the job and line manifests that tests of
// several packages share, as TOML files under testdata/ (jobs/<name>.toml,
// lines/<name>.toml), and reads them. It is imported by tests only.
//
// A fixture that tests vary is a text/template with the delimiters <% and
// %> (the manifests' own {{param}} placeholders stay as they are): Job and
// Line fill it from vars, and a key a template uses but vars lacks is an
// error, so a variant is never half filled.
package manifesttest

import (
	"embed"
	"fmt"
	"strings"
	"text/template"
)

//go:embed testdata
var files embed.FS

// Job returns testdata/jobs/<name>.toml, filled from vars when given.
func Job(name string, vars ...map[string]any) string { return load("jobs", name, vars) }

// Line returns testdata/lines/<name>.toml, filled from vars when given.
func Line(name string, vars ...map[string]any) string { return load("lines", name, vars) }

// load panics on a missing or malformed fixture: it is a bug in the test.
func load(kind, name string, vars []map[string]any) string {
	data, err := files.ReadFile("testdata/" + kind + "/" + name + ".toml")
	if err != nil {
		panic(fmt.Sprintf("manifesttest: no fixture %s/%s: %v", kind, name, err))
	}
	src := string(data)
	if !strings.Contains(src, "<%") {
		if len(vars) > 0 {
			panic(fmt.Sprintf("manifesttest: %s/%s takes no vars", kind, name))
		}
		return src
	}
	values := map[string]any{}
	for _, v := range vars {
		for k, x := range v {
			values[k] = x
		}
	}
	tmpl, err := template.New(name).Delims("<%", "%>").Option("missingkey=error").Parse(src)
	if err != nil {
		panic(fmt.Sprintf("manifesttest: %s/%s: %v", kind, name, err))
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, values); err != nil {
		panic(fmt.Sprintf("manifesttest: %s/%s: %v", kind, name, err))
	}
	return b.String()
}

// Manual is the [trigger] body of a line started by hand.
const Manual = `type = "manual"`

// OneStepJob is job name with one task "t" of one step running exec (a
// TOML array, or a string for a shell); step names the step unless "".
func OneStepJob(name, step, exec string) string {
	return Job("one-step", map[string]any{"name": name, "step": step, "exec": exec})
}

// OneStageLine is line name, started by trigger (the body of its [trigger]
// table, such as Manual), with one stage id running job. Keys of the stage
// (max_attempts) or tables ([limits]) may be appended to it.
func OneStageLine(name, trigger, id, job string) string {
	return Line("one-stage", map[string]any{"name": name, "trigger": trigger, "stage": id, "job": job})
}
