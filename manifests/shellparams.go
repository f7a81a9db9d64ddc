package manifests

import (
	"fmt"
	"path"
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
// and so is the script of a shell's -c (any of the usual shells, with its
// options before or after -c: `sh -c script ...`, `bash -e -o pipefail -c
// script`), also behind a command that runs its operand (`env`, `timeout
// 60`, `nice -n 5` ...): those get RenderShell; every other element is an
// argument, rendered as text (Render).
func RenderCommand(list []string, params map[string]any) ([]string, error) {
	out, err := RenderAll(list, params)
	if err != nil {
		return nil, err
	}
	if script := shellScript(list); script >= 0 {
		if out[script], err = RenderShell(list[script], params); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// shellScript is the index of the element of list that a shell runs as a
// script, or -1.
func shellScript(list []string) int {
	if len(list) == 1 {
		return 0
	}
	sh := -1
	for i, a := range list {
		if shells[path.Base(a)] {
			sh = i
			break
		}
		if i == 0 && !wrappers[path.Base(a)] {
			return -1
		}
	}
	if sh < 0 {
		return -1
	}
	return shellScriptAfter(list, sh+1)
}

// shellScriptAfter reads a shell's options from list[from:] (as sh reads
// them: short option clusters, `-o name`, `--`, long options) and returns
// the index of the script when -c is among them, else -1.
func shellScriptAfter(list []string, from int) int {
	withC := false
	for j := from; j < len(list); j++ {
		a := list[j]
		switch {
		case a == "--" || a == "-":
			if withC && j+1 < len(list) {
				return j + 1
			}
			return -1
		case strings.HasPrefix(a, "--"):
			if shellLongWithArg[a] {
				j++
			}
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			withC = withC || a[0] == '-' && strings.ContainsRune(a, 'c')
			if strings.ContainsAny(a[1:], "oO") { // -o name, -O shopt
				j++
			}
		default:
			if withC {
				return j
			}
			return -1 // a script file: the rest are its arguments
		}
	}
	return -1
}

var (
	shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ash": true, "ksh": true, "mksh": true}
	// wrappers run their operand as a command.
	wrappers = map[string]bool{"env": true, "timeout": true, "nice": true, "nohup": true, "setsid": true, "stdbuf": true,
		"time": true, "ionice": true, "chrt": true, "taskset": true, "xargs": true, "flock": true, "sudo": true,
		"doas": true, "runuser": true, "unshare": true, "chroot": true, "exec": true, "command": true, "tini": true, "dumb-init": true, "busybox": true}
	shellLongWithArg = map[string]bool{"--rcfile": true, "--init-file": true}
)
