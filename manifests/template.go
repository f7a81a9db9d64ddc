package manifests

import (
	"fmt"
	"regexp"
	"strings"
)

// ReservedRunID is the placeholder every job may use: the id of the job run.
const ReservedRunID = "run_id"

var placeholderRE = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// Placeholders returns the names of the {{name}} placeholders in s, in order
// of appearance (with repeats).
func Placeholders(s string) []string {
	var names []string
	for _, m := range placeholderRE.FindAllStringSubmatch(s, -1) {
		names = append(names, m[1])
	}
	return names
}

// Render replaces every {{name}} in s with the value of params[name] (see
// Stringify). A placeholder whose name is not in params is an error.
func Render(s string, params map[string]any) (string, error) {
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		name := placeholderRE.FindStringSubmatch(m)[1]
		v, ok := params[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return Stringify(v)
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown placeholder {{%s}}", strings.Join(missing, "}}, {{"))
	}
	return out, nil
}

// RenderAll renders every string of a list.
func RenderAll(list []string, params map[string]any) ([]string, error) {
	out := make([]string, len(list))
	for i, s := range list {
		r, err := Render(s, params)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}
