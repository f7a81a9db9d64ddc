package manifests

import (
	"os/exec"
	"strings"
	"testing"
)

func TestRenderShellKeepsValuesData(t *testing.T) {
	params := map[string]any{"who": "you", "evil": `x; id; $(id) "'` + "`id`", "n": 3}
	cases := map[string]string{
		`echo "hello {{who}}"`:       "hello you",
		`echo hello {{who}}`:         "hello you",
		`echo 'hello {{who}}'`:       "hello you",
		`echo {{evil}}`:              params["evil"].(string),
		`echo "{{evil}}"`:            params["evil"].(string),
		`echo '{{ evil }}'`:          params["evil"].(string),
		`echo "a\"{{n}}"`:            `a"3`,
		`printf '%s\n' {{who}}{{n}}`: "you3",
	}
	env := []string{"PATH=/usr/bin:/bin"}
	for k, v := range ParamEnv(params) {
		env = append(env, k+"="+v)
	}
	for script, want := range cases {
		got, err := RenderShell(script, params)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/sh", "-c", got)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSuffix(string(out), "\n") != want {
			t.Errorf("%s → %s: %q %v, want %q", script, got, out, err, want)
		}
	}
	if _, err := RenderShell("echo {{nope}}", params); err == nil {
		t.Error("an unknown placeholder was accepted")
	}
	if got, _ := RenderCommand([]string{"echo", "{{evil}}"}, params); got[1] != params["evil"] {
		t.Errorf("argument list not rendered as text: %q", got)
	}
	if got, _ := RenderCommand([]string{"sh", "-c", "echo {{evil}}", "{{who}}"}, params); got[2] != `echo "${SVC_PARAM_EVIL}"` || got[3] != "you" {
		t.Errorf("sh -c script not rendered for a shell: %q", got)
	}
	if ParamEnvName("repo-url") != "SVC_PARAM_REPO_URL" {
		t.Error(ParamEnvName("repo-url"))
	}
}

// A shell's -c script is found with the shell's options before or after -c
// and behind a command that runs its operand: README's "the script of
// ["sh", "-c", script, …] or another shell's -c" (`bash -e -c`, `bash -o
// pipefail -c` ran a value as code before); anything else stays text.
func TestRenderCommandFindsShellScripts(t *testing.T) {
	params := map[string]any{"evil": `x"; printf P%sD WNE; echo "`}
	scripts := [][]string{
		{"sh", "-c", `echo "{{evil}}"`},
		{"/bin/bash", "-e", "-c", `echo "{{evil}}"`},
		{"bash", "-o", "pipefail", "-c", `echo "{{evil}}"`},
		{"bash", "-euo", "pipefail", "-c", `echo "{{evil}}"`},
		{"bash", "--noprofile", "--norc", "-c", `echo "{{evil}}"`},
		{"sh", "-c", "--", `echo "{{evil}}"`},
		{"sh", "-c", "-e", `echo "{{evil}}"`},
		{"env", "A=1", "sh", "-c", `echo "{{evil}}"`},
		{"timeout", "30", "sh", "-ec", `echo "{{evil}}"`},
		{"nice", "-n", "5", "bash", "-c", `echo "{{evil}}"`},
		{"busybox", "sh", "-c", `echo "{{evil}}"`},
	}
	env := []string{"PATH=/usr/bin:/bin"}
	for k, v := range ParamEnv(params) {
		env = append(env, k+"="+v)
	}
	for _, argv := range scripts {
		got, err := RenderCommand(argv, params)
		if err != nil {
			t.Fatal(err)
		}
		if want := `echo "${SVC_PARAM_EVIL}"`; got[len(got)-1] != want {
			t.Errorf("%q: the script is %q, want %q", argv, got[len(got)-1], want)
			continue
		}
		if argv[0] == "busybox" {
			continue // not necessarily installed
		}
		cmd := exec.Command(got[0], got[1:]...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "PWNED") {
			t.Errorf("%q ran the value as code: %q %v", argv, out, err)
		}
	}
	args := [][]string{
		{"echo", "{{evil}}"},
		{"sh", "script.sh", "{{evil}}"},
		{"bash", "-e", "script.sh", "{{evil}}"},
		{"grep", "-c", "{{evil}}"},
		{"env", "python3", "-c", "{{evil}}"},
	}
	for _, argv := range args {
		got, err := RenderCommand(argv, params)
		if err != nil {
			t.Fatal(err)
		}
		if got[len(got)-1] != params["evil"] {
			t.Errorf("%q: argument %q, want the value as text", argv, got[len(got)-1])
		}
	}
}
