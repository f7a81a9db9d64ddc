// Package sandboxtest holds what the sandbox's isolation tests share (of
// the driver and of the factoryd binary): the probe scripts a hostile step
// runs, as files under testdata/, and a host listener for a step to try to
// reach. It is imported by tests only.
package sandboxtest

import (
	"bytes"
	"embed"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/template"
)

//go:embed testdata/*.sh
var scripts embed.FS

// The probe scripts (testdata/<name>.sh).
const (
	// GrandchildAlloc: a grandchild allocates 300 MB and prints the size.
	GrandchildAlloc = "grandchild-alloc"
	// SetsidEscape: setsid starts marker (a command line) out of the
	// step's session, then the step sleeps sleep seconds.
	SetsidEscape = "setsid-escape"
	// ReachHost: connects to every host:port of addrs and every unix
	// socket of sockets; prints CONNECTED and what it read for each it
	// reached; always exits 0.
	ReachHost = "reach-host"
)

// Script is the probe script name, filled from vars (text/template with
// the delimiters <% and %>; every key the script uses must be given).
func Script(name string, vars map[string]any) string {
	data, err := scripts.ReadFile("testdata/" + name + ".sh")
	if err != nil {
		panic(fmt.Sprintf("sandboxtest: no script %s: %v", name, err))
	}
	tmpl, err := template.New(name).Delims("<%", "%>").Option("missingkey=error").Parse(string(data))
	if err != nil {
		panic(fmt.Sprintf("sandboxtest: script %s: %v", name, err))
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, vars); err != nil {
		panic(fmt.Sprintf("sandboxtest: script %s: %v", name, err))
	}
	return strings.TrimSpace(b.String())
}

// Listen answers every connection to a new listener (network "tcp" or
// "unix") with banner and a newline, until the test ends; it returns the
// listener's address (host:port, or the socket's path).
func Listen(t testing.TB, network, address, banner string) string {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(banner + "\n"))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// Processes lists the live host processes (zombies waiting for their
// reaper excluded) whose command line, its arguments joined by spaces,
// match accepts.
func Processes(match func(cmdline string) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !match(strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}
