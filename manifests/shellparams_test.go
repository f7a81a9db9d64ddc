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
