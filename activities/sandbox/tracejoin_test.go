package sandbox

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A command is in every group of its sandbox's command before it runs,
// whether it joins them traced at exec or through the shim: the first
// thing it reads, /proc/self/cgroup, names them. Started by a launcher
// (cgroup v1, launcher.go), it is in all of them but the freezer's, which
// it joins when the sandbox is paused (TestPauseFreezesLauncherCommands).
func TestCommandRunsInsideItsCgroups(t *testing.T) {
	if len(controllers()) == 0 {
		t.Skip("SKIPPING: no cgroup hierarchy here")
	}
	l := newLocal(t)
	for _, mode := range []string{"traced", "shim", "launcher"} {
		if mode == "launcher" && launchersOn() {
			readySpares(t, l) // a new sandbox's first command takes one
		}
		sb := acquire(t, l, Spec{Name: "joined-" + mode, InternetEnabled: true})
		shimOnly, noLaunchers = mode == "shim", mode == "traced"
		var out bytes.Buffer
		res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out})
		shimOnly, noLaunchers = false, false
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v", mode, res, err)
		}
		launched := mode == "launcher" && launchersOn()
		for _, c := range controllers() {
			found := false
			for _, line := range strings.Split(out.String(), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 && (c == "" && parts[0] == "0" || c != "" && strings.Contains(","+parts[1]+",", ","+c+",")) {
					found = strings.HasPrefix(parts[2], "/"+cgroupParent+"/"+sb.CgroupName+"/x")
				}
			}
			if want := !launched || c != "freezer"; found != want {
				t.Errorf("%s: in its %q group: %v, want %v:\n%s", mode, c, found, want, out.String())
			}
		}
	}
}
