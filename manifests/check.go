package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"

	"github.com/BurntSushi/toml"
)

// PeekName returns the name a document gives in its section ("job" or
// "line"), or "" when it gives none or does not decode; nothing else of the
// document is checked.
func PeekName(data []byte, f Format, section string) string {
	var doc map[string]any
	if CheckSize(data, f) != nil {
		return ""
	}
	switch f {
	case FormatTOML:
		if _, err := toml.Decode(string(data), &doc); err != nil {
			return ""
		}
	case FormatJSON:
		if err := json.Unmarshal(data, &doc); err != nil {
			return ""
		}
	}
	sec, _ := doc[section].(map[string]any)
	name, _ := sec["name"].(string)
	return name
}

// ValidateBytes parses and validates a job ("jobs") or line ("lines")
// document and returns every problem (nil when valid). Stage jobs are not
// checked.
func ValidateBytes(kind string, data []byte, f Format) Problems {
	if kind == "lines" {
		_, ps := CheckLine(data, f)
		return ps
	}
	_, ps := CheckJob(data, f)
	return ps
}

// WantedProblems reads the "# want: <problem>" header lines of a corpus file.
func WantedProblems(data []byte) []string {
	var want []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
			want = append(want, w)
		}
	}
	return want
}
