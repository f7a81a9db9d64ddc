package manifests

import (
	"bufio"
	"bytes"
	"strings"
)

// ValidateBytes parses and validates a job ("jobs") or line ("lines")
// document and returns every problem (nil when valid). Stage jobs are not
// checked.
func ValidateBytes(kind string, data []byte, f Format) Problems {
	if kind == "lines" {
		m, err := ParseLine(data, f)
		if err != nil {
			return AsProblems(err)
		}
		return ValidateLine(m)
	}
	m, err := ParseJob(data, f)
	if err != nil {
		return AsProblems(err)
	}
	return ValidateJob(m)
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
