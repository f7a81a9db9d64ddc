package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestServiceForwarded: an isolated step reaches a Service on its own
// 127.0.0.1 (online and offline), the request arrives at the handler, the
// host's loopback stays unreachable, and the socket is gone afterwards.
func TestServiceForwarded(t *testing.T) {
	l := newIsolated(t)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HOST-LOOPBACK-REACHED\n"))
			c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	var got []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprintf(w, "served %s", r.URL.Path)
	})
	for _, online := range []bool{true, false} {
		name := fmt.Sprintf("svc-%v", online)
		sb := acquire(t, l, Spec{Name: name, InternetEnabled: online})
		mu.Lock()
		got = nil
		mu.Unlock()
		script := `printf 'GET /inference/v1/models HTTP/1.0\r\nAuthorization: Bearer tok\r\n\r\n' | socat -t5 - TCP:127.0.0.1:9555; echo; ` +
			fmt.Sprintf(`printf 'x' | socat -t2 - TCP:127.0.0.1:%d 2>&1 || echo host-loopback-refused; `, hostPort) +
			`ls -l /run/svc`
		res, out := run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{script},
			Services: []Service{{Name: "inference", Port: 9555, Handler: handler}}})
		if res.ExitCode != 0 || !strings.Contains(out, "served /inference/v1/models") {
			t.Fatalf("online=%v: exit %d, the step did not reach the service:\n%s", online, res.ExitCode, out)
		}
		mu.Lock()
		saw := append([]string(nil), got...)
		mu.Unlock()
		if len(saw) != 1 || saw[0] != "GET /inference/v1/models Bearer tok" {
			t.Fatalf("online=%v: the handler saw %q", online, saw)
		}
		if strings.Contains(out, "HOST-LOOPBACK-REACHED") || !strings.Contains(out, "host-loopback-refused") {
			t.Fatalf("online=%v: the step reached the host's loopback:\n%s", online, out)
		}
		if !strings.Contains(out, "inference.sock") {
			t.Fatalf("online=%v: the socket is not at /run/svc:\n%s", online, out)
		}
		left, _ := filepath.Glob(filepath.Join(l.root, "svc", "*.sock"))
		if len(left) != 0 {
			t.Fatalf("sockets left after the step: %v", left)
		}
		// Without Services, nothing listens and /run/svc does not exist.
		res, out = run(t, l, ExecRequest{Sandbox: sb.Name, Argv: []string{`socat -t2 - TCP:127.0.0.1:9555 </dev/null 2>&1 || echo refused; ls /run/svc 2>&1; true`}})
		if res.ExitCode != 0 || !strings.Contains(out, "refused") || !strings.Contains(out, "No such file") {
			t.Fatalf("online=%v: without services: exit %d\n%s", online, res.ExitCode, out)
		}
	}
	if _, err := os.Stat(filepath.Join(l.root, "svc")); err != nil {
		t.Fatal(err)
	}
}
