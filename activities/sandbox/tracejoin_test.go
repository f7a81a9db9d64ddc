package sandbox

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A command is in every group of its sandbox's command before it runs,
// whether it joins them traced at exec or through the shim: the first
// thing it reads, /proc/self/cgroup, names them.
func TestCommandRunsInsideItsCgroups(t *testing.T) {
	if len(controllers()) == 0 {
		t.Skip("SKIPPING: no cgroup hierarchy here")
	}
	l := newLocal(t)
	sb := acquire(t, l, Spec{Name: "joined", InternetEnabled: true})
	for _, shimmed := range []bool{false, true} {
		shimOnly = shimmed
		var out bytes.Buffer
		res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name, Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out})
		shimOnly = false
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("shim %v: %+v %v", shimmed, res, err)
		}
		for _, c := range controllers() {
			found := false
			for _, line := range strings.Split(out.String(), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 && (c == "" && parts[0] == "0" || c != "" && strings.Contains(","+parts[1]+",", ","+c+",")) {
					found = strings.HasPrefix(parts[2], "/"+cgroupParent+"/"+sb.CgroupName+"/x")
				}
			}
			if !found {
				t.Errorf("shim %v: not in its %q group:\n%s", shimmed, c, out.String())
			}
		}
	}
}
