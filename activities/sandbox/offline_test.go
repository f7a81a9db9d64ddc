package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// offlineHelperEnv makes TestOfflineHelper act as the step of
// TestOfflineLoopback (run as the test binary inside the sandbox).
const offlineHelperEnv = "LF_OFFLINE_HELPER_HOST_ADDR"

// TestOfflineLoopback: a step of a sandbox with internet_enabled = false has
// a working loopback (it can serve and reach 127.0.0.1) but reaches neither
// the host's loopback nor any other network.
func TestOfflineLoopback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPING: network namespaces need root")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
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
			c.Close()
		}
	}()

	l := newLocal(t)
	sb := acquire(t, l, Spec{Mode: "provision", Name: "offline-lo", InternetEnabled: false})
	var out bytes.Buffer
	res, err := l.Exec(context.Background(), ExecRequest{Sandbox: sb.Name,
		Argv: []string{self, "-test.run=^TestOfflineHelper$", "-test.count=1"}, Stdout: &out, Stderr: &out,
		Env: map[string]string{offlineHelperEnv: host.Addr().String()}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("helper exit %d:\n%s", res.ExitCode, out.String())
	}
	for _, want := range []string{"loopback: ok", "host loopback: unreachable", "outside: unreachable"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("step output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestOfflineHelper is the step of TestOfflineLoopback; it does nothing
// when run on its own.
func TestOfflineHelper(t *testing.T) {
	hostAddr := os.Getenv(offlineHelperEnv)
	if hostAddr == "" {
		t.Skip("only run as TestOfflineLoopback's step")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial own loopback listener: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read from loopback: %q %v", buf, err)
	}
	c.Close()
	fmt.Println("loopback: ok")

	for _, tc := range []struct{ label, addr string }{
		{"host loopback", hostAddr}, // the host's 127.0.0.1 is another interface
		{"outside", "192.0.2.1:9"},  // TEST-NET-1: no route in the namespace
	} {
		if c, err := net.DialTimeout("tcp", tc.addr, 2*time.Second); err == nil {
			c.Close()
			t.Fatalf("%s (%s) is reachable from an offline step", tc.label, tc.addr)
		} else {
			fmt.Printf("%s: unreachable (%v)\n", tc.label, err)
		}
	}
}
