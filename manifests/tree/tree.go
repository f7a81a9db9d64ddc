// Package tree finds and checks manifest trees offline: jobs/<name>/job.toml
// (or job.json), lines/*.toml|json and knowledge/<slug>.md. Both factoryd
// validate and factoryctl use it.
package tree

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/linefactory/linefactory/manifests"
	"github.com/linefactory/linefactory/manifests/agentconf"
)

// Validate implements `validate PATH...`: it checks manifest
// files or directories offline and prints every problem as
// "file: location: message". It exits 1 when any manifest is invalid.
//
// A directory is searched for jobs/<name>/job.toml (or job.json) and line
// files lines/*.toml (or *.json) at any depth; the stages of the lines found
// in a directory are checked against the jobs found (none found: every stage's
// job is unknown). A file is a line if its top level has a "line" key, else a
// job; a line file given alone gets every check but job existence, unless job
// manifests were given too.
func Validate(args []string, stdout, stderr io.Writer) int {
	return ValidateWith(args, nil, stdout, stderr)
}

// ValidateWith is Validate that also checks run_agent steps against the
// server configuration file agents, as a deploy does (nil: no check).
func ValidateWith(args []string, agents *agentconf.Config, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: validate PATH...")
		return 2
	}
	var jobs, lines []string
	// inDir marks lines found by walking a directory: their stages are always
	// checked against the jobs found.
	inDir := map[string]bool{}
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", arg, err)
			return 2
		}
		if !info.IsDir() {
			if IsLineFile(arg) {
				lines = append(lines, arg)
			} else {
				jobs = append(jobs, arg)
			}
			continue
		}
		j, l, err := Find(arg)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", arg, err)
			return 2
		}
		jobs, lines = append(jobs, j...), append(lines, l...)
		for _, f := range l {
			inDir[f] = true
		}
	}
	if len(jobs)+len(lines) == 0 {
		fmt.Fprintln(stderr, "no manifests found (looked for jobs/<name>/job.toml|json and lines/*.toml|json)")
		return 1
	}
	bad := 0
	report := func(file string, ps manifests.Problems) {
		if len(ps) == 0 {
			return
		}
		bad++
		for _, p := range ps {
			if p.Path == "" {
				fmt.Fprintf(stdout, "%s: %s\n", file, p.Message)
			} else {
				fmt.Fprintf(stdout, "%s: %s: %s\n", file, p.Path, p.Message)
			}
		}
	}
	known := map[string]bool{}
	for _, file := range jobs {
		m, ps := LoadJob(file)
		if m != nil {
			known[m.Job.Name] = true
			if agents != nil {
				ps = append(ps, manifests.CheckAgentSteps(m, agents)...)
			}
		}
		report(file, ps)
	}
	for _, file := range lines {
		m, ps := LoadLine(file)
		if m != nil && (inDir[file] || len(jobs) > 0) {
			ps = append(ps, manifests.CheckLineJobs(m, func(job, _ string) (bool, bool) { return known[job], true })...)
		}
		report(file, ps)
	}
	total := len(jobs) + len(lines)
	if bad > 0 {
		fmt.Fprintf(stdout, "invalid: %d of %d files\n", bad, total)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d files\n", total)
	return 0
}

// ReadManifest reads a manifest file and tells its format by its extension.
func ReadManifest(file string) ([]byte, manifests.Format, manifests.Problems) {
	format, ok := manifests.FormatFromPath(file)
	if !ok {
		return nil, "", manifests.Problems{{Message: "unknown file type: want .toml or .json"}}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, "", manifests.Problems{{Message: err.Error()}}
	}
	return data, format, nil
}

// LoadJob checks a job file; a job.toml|json must sit in a directory named
// after the job. The manifest is returned (with at least its name) even when
// it has problems, so lines can be checked against it.
func LoadJob(file string) (*manifests.JobManifest, manifests.Problems) {
	data, format, ps := ReadManifest(file)
	if ps != nil {
		return nil, ps
	}
	m, ps := manifests.CheckJob(data, format)
	name := manifests.PeekName(data, format, "job")
	if base := filepath.Base(file); (base == "job.toml" || base == "job.json") && name != "" {
		ps = append(ps, manifests.CheckName("job.name", filepath.Base(filepath.Dir(file)), name)...)
	}
	if m == nil {
		// Lines are still checked against a job that has problems of its own.
		m = &manifests.JobManifest{Job: manifests.JobSection{Name: name}}
	}
	m.Job.Name = name
	return m, ps
}

// LoadLine checks a line file (every check but the stages' jobs).
func LoadLine(file string) (*manifests.LineManifest, manifests.Problems) {
	data, format, ps := ReadManifest(file)
	if ps != nil {
		return nil, ps
	}
	return manifests.CheckLine(data, format)
}

// IsLineFile tells a line from a job by a "line" key at the top level of
// the document. A file that does not decode is treated as a job, whose
// parser then reports the problem.
func IsLineFile(file string) bool {
	data, format, ps := ReadManifest(file)
	if ps != nil {
		return false
	}
	if format == manifests.FormatJSON {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(data, &top); err != nil {
			return false
		}
		_, ok := top["line"]
		return ok
	}
	var top map[string]any
	if _, err := toml.Decode(string(data), &top); err != nil {
		return false
	}
	_, ok := top["line"]
	return ok
}

// Find returns the job and line files under root, sorted.
func Find(root string) (jobs, lines []string, err error) {
	jobs, lines, _, err = FindAll(root)
	return jobs, lines, err
}

// FindAll is Find that also returns the knowledge files under root:
// knowledge/<slug>.md, the slug being the item's identifier.
func FindAll(root string) (jobs, lines, knowledge []string, err error) {
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		dir, base := filepath.Dir(path), filepath.Base(path)
		switch {
		case (base == "job.toml" || base == "job.json") && filepath.Base(filepath.Dir(dir)) == "jobs":
			jobs = append(jobs, path)
		case filepath.Base(dir) == "lines":
			if _, ok := manifests.FormatFromPath(path); ok {
				lines = append(lines, path)
			}
		case filepath.Base(dir) == "knowledge" && strings.HasSuffix(base, ".md"):
			knowledge = append(knowledge, path)
		}
		return nil
	})
	sort.Strings(jobs)
	sort.Strings(lines)
	sort.Strings(knowledge)
	return jobs, lines, knowledge, err
}
