package sandboxtest

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReachHostDetects: run on the host, where nothing blocks it, the
// probe reports what it reached; a probe that never connects would make
// the isolation tests pass for nothing.
func TestReachHostDetects(t *testing.T) {
	_, port, _ := net.SplitHostPort(Listen(t, "tcp", "127.0.0.1:0", "HOST-LISTENER"))
	sock := Listen(t, "unix", filepath.Join(t.TempDir(), "s.sock"), "HOST-SOCKET")
	script := Script(ReachHost, map[string]any{"addrs": []string{"127.0.0.1:" + port}, "sockets": []string{sock}})
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{"CONNECTED 127.0.0.1:" + port, "HOST-LISTENER", "CONNECTED " + sock, "HOST-SOCKET"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the probe did not report %q:\n%s\n%s", want, script, out)
		}
	}
}

// TestProcessesFindsItself: the test's own process is found by its
// command line, and a match nothing has finds none.
func TestProcessesFindsItself(t *testing.T) {
	cmd := exec.Command("sleep", "31337")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if got := Processes(func(c string) bool { return c == "sleep 31337" }); len(got) != 1 || got[0] != cmd.Process.Pid {
		t.Fatalf("found %v, want [%d]", got, cmd.Process.Pid)
	}
	if got := Processes(func(string) bool { return false }); len(got) != 0 {
		t.Fatalf("found %v", got)
	}
}
