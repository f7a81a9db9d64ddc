package manifests

import (
	"os"
	"path/filepath"
	"testing"
)

func addSeeds(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err == nil {
			f.Add(data, file[len(file)-4:] == "json")
		}
	}
}

// FuzzParseJob: parsing, validating, normalizing and hashing any input never
// panics.
func FuzzParseJob(f *testing.F) {
	addSeeds(f, "examples/jobs/*/job.toml")
	addSeeds(f, "examples/jobs/*/job.json")
	addSeeds(f, "testdata/hello.json")
	addSeeds(f, "testdata/invalid/jobs/*.toml")
	addSeeds(f, "testdata/invalid/jobs/*.json")
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		format := FormatTOML
		if isJSON {
			format = FormatJSON
		}
		// The lenient path validates what is left of a malformed manifest.
		if cm, ps := CheckJob(data, format); cm == nil && ps == nil {
			t.Fatalf("CheckJob: manifest %v with problems %v", cm != nil, ps)
		}
		m, err := ParseJob(data, format)
		if err != nil {
			return
		}
		if ValidateJob(m) == nil {
			NormalizeJob(m)
			if _, err := ContentHash(m); err != nil {
				t.Fatalf("hash of a valid manifest: %v", err)
			}
			Claims(m)
		}
	})
}

// FuzzParseLine: the same for lines.
func FuzzParseLine(f *testing.F) {
	addSeeds(f, "examples/lines/*")
	addSeeds(f, "testdata/invalid/lines/*.toml")
	addSeeds(f, "testdata/invalid/lines/*.json")
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		format := FormatTOML
		if isJSON {
			format = FormatJSON
		}
		if cm, ps := CheckLine(data, format); cm == nil && ps == nil {
			t.Fatalf("CheckLine: manifest %v with problems %v", cm != nil, ps)
		}
		m, err := ParseLine(data, format)
		if err != nil {
			return
		}
		if ValidateLine(m) == nil {
			NormalizeLine(m)
			if _, err := ContentHash(m); err != nil {
				t.Fatalf("hash of a valid manifest: %v", err)
			}
			for _, tr := range m.Transitions {
				if tr.When != nil {
					_, _ = Evaluate(*tr.When, EvalContext{})
				}
			}
		}
	})
}
