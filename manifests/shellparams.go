package manifests

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// ParamEnvPrefix starts the name of the variable each param is exported
// to steps as: SVC_PARAM_<NAME>, the name upper-cased with every character
// other than a letter, digit or underscore replaced by an underscore.
const ParamEnvPrefix = "SVC_PARAM_"

// ParamEnvName is the variable a param is exported as.
func ParamEnvName(name string) string {
	var b strings.Builder
	b.WriteString(ParamEnvPrefix)
	for _, r := range strings.ToUpper(name) {
		if r == '_' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// ParamEnv exports every param (see Stringify) as SVC_PARAM_<NAME>.
func ParamEnv(params map[string]any) map[string]string {
	env := make(map[string]string, len(params))
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		env[ParamEnvName(name)] = Stringify(params[name])
	}
	return env
}

// RenderShell renders a string that a shell will run: each {{name}}
// becomes a reference to the param's variable instead of its text, quoted
// for where it stands ("${SVC_PARAM_NAME}" outside quotes,
// ${SVC_PARAM_NAME} inside double quotes, and closing and reopening single
// quotes around "${SVC_PARAM_NAME}" inside them). So a value is data,
// never code: `echo "hello {{who}}"` prints the value, and a value such as
// `x; id` or `$(id)` stays text. The variables come from ParamEnv. A
// placeholder whose name is not in params is an error, as in Render.
func RenderShell(s string, params map[string]any) (string, error) {
	var (
		out     strings.Builder
		missing []string
		quote   byte // 0, '\'' or '"'
	)
	for i := 0; i < len(s); {
		if loc := placeholderRE.FindStringSubmatchIndex(s[i:]); loc != nil && loc[0] == 0 {
			name := s[i+loc[2] : i+loc[3]]
			if _, ok := params[name]; !ok {
				missing = append(missing, name)
			}
			ref := "${" + ParamEnvName(name) + "}"
			switch quote {
			case '"':
				out.WriteString(ref)
			case '\'':
				out.WriteString(`'"` + ref + `"'`)
			default:
				out.WriteString(`"` + ref + `"`)
			}
			i += loc[1]
			continue
		}
		c := s[i]
		switch {
		case c == '\\' && quote != '\'' && i+1 < len(s):
			out.WriteString(s[i : i+2])
			i += 2
			continue
		case c == '\'' && quote == 0, c == '"' && quote == 0:
			quote = c
		case c == quote:
			quote = 0
		}
		out.WriteByte(c)
		i++
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("unknown placeholder {{%s}}", strings.Join(missing, "}}, {{"))
	}
	return out.String(), nil
}

// RenderCommand renders an exec list: a single element is run by a shell,
// and so is the script of `sh -c script ...` (any of the usual shells, with
// flags ending in c): those get RenderShell; every other element is an
// argument, rendered as text (Render).
func RenderCommand(list []string, params map[string]any) ([]string, error) {
	out, err := RenderAll(list, params)
	if err != nil {
		return nil, err
	}
	script := -1
	switch {
	case len(list) == 1:
		script = 0
	case len(list) >= 3 && shells[path.Base(list[0])] && shellFlagsRE.MatchString(list[1]):
		script = 2
	}
	if script >= 0 {
		if out[script], err = RenderShell(list[script], params); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var (
	shells       = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ash": true, "ksh": true}
	shellFlagsRE = regexp.MustCompile(`^-[a-z]*c[a-z]*$`)
)
