package main

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
)

// runValidate implements `factoryd validate PATH...`: it checks manifest
// files or directories offline and prints every problem as
// "file: location: message". It exits 1 when any manifest is invalid.
//
// A directory is searched for jobs/<name>/job.toml (or job.json) and line
// files lines/*.toml (or *.json) at any depth; the stages of the lines found
// in a directory are checked against the jobs found (none found: every stage's
// job is unknown). With --config FILE, run_agent steps are checked against
// the server configuration file as a deploy checks them. A file is a line if its top level has a "line" key, else a
// job; a line file given alone gets every check but job existence, unless job
// manifests were given too.
func runValidate(args []string, stdout, stderr io.Writer) int {
	args, agents, err := validateConfigFlag(args)
	if err != nil {
		fmt.Fprintf(stderr, "factoryd validate: %v\n", err)
		return 2
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: factoryd validate [--config FILE] PATH...")
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
			if isLineFile(arg) {
				lines = append(lines, arg)
			} else {
				jobs = append(jobs, arg)
			}
			continue
		}
		j, l, err := findManifests(arg)
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
		m, ps := loadJob(file)
		if m != nil {
			known[m.Job.Name] = true
			if agents != nil {
				ps = append(ps, manifests.CheckAgentSteps(m, agents)...)
			}
		}
		report(file, ps)
	}
	for _, file := range lines {
		m, ps := loadLine(file)
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

func readManifest(file string) ([]byte, manifests.Format, manifests.Problems) {
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

func loadJob(file string) (*manifests.JobManifest, manifests.Problems) {
	data, format, ps := readManifest(file)
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

func loadLine(file string) (*manifests.LineManifest, manifests.Problems) {
	data, format, ps := readManifest(file)
	if ps != nil {
		return nil, ps
	}
	return manifests.CheckLine(data, format)
}

// isLineFile tells a line from a job by a "line" key at the top level of
// the document. A file that does not decode is treated as a job, whose
// parser then reports the problem.
func isLineFile(file string) bool {
	data, format, ps := readManifest(file)
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

func findManifests(root string) (jobs, lines []string, err error) {
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
		}
		return nil
	})
	sort.Strings(jobs)
	sort.Strings(lines)
	return jobs, lines, err
}
