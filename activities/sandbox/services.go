package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Service is an HTTP endpoint of the worker that one isolated command may
// reach, and nothing else of the host with it: the driver serves Handler
// on a Unix socket of its own for that command (0600, owned by the
// sandbox's host user), binds it into the sandbox at /run/svc/<Name>.sock,
// and a forwarder (socat) in the command's own network namespace listens on
// 127.0.0.1:Port and passes each connection to the socket. It works
// online and offline; the forwarder ends with the command. Without
// isolation the command is on the host and Services are not served.
type Service struct {
	Name    string // [a-z0-9_-]+
	Port    int    // inside the sandbox, on 127.0.0.1
	Handler http.Handler
}

// ServiceSocketDir is where a Service's socket appears in the sandbox.
const ServiceSocketDir = "/run/svc"

// forwardReadyTries bounds the wait for the forwarders to listen (10 ms apart).
const forwardReadyTries = 1000

// serveServices starts the services of a command, adds their sockets to
// its mounts and wraps its argv so that the forwarders listen before it
// runs. stop closes the sockets.
func (l *Local) serveServices(sb Sandbox, p *execPlan, services []Service) (stop func(), err error) {
	stop = func() {}
	if len(services) == 0 || !l.isolated() {
		return stop, nil
	}
	socat, err := lookPath("socat", "/", l.stepPath())
	if err != nil {
		return stop, errorf(CodeProvisioningFailed, err, "socat is needed to forward %s into the sandbox (apt-get install socat)", services[0].Name)
	}
	dir := filepath.Join(l.root, "svc")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return stop, errorf(CodeExecFailed, err, "service socket directory")
	}
	var servers []*http.Server
	var paths []string
	stop = func() {
		for _, s := range servers {
			_ = s.Close()
		}
		for _, f := range paths {
			_ = os.Remove(f)
		}
	}
	var script strings.Builder
	var ready []string
	seen := map[int]bool{}
	for _, s := range services {
		if !validServiceName(s.Name) || s.Port <= 0 || s.Port > 65535 || seen[s.Port] || s.Handler == nil {
			stop()
			return func() {}, errorf(CodeExecFailed, nil, "invalid service %q on port %d", s.Name, s.Port)
		}
		seen[s.Port] = true
		host := filepath.Join(dir, strconv.FormatInt(execSeq.Add(1), 10)+".sock")
		_ = os.Remove(host)
		ln, err := net.Listen("unix", host)
		if err != nil {
			stop()
			return func() {}, errorf(CodeExecFailed, err, "listen for service %s", s.Name)
		}
		paths = append(paths, host)
		err = os.Chown(host, sb.HostUID, sb.HostUID)
		if err == nil {
			err = os.Chmod(host, 0o600)
		}
		if err != nil {
			_ = ln.Close()
			stop()
			return func() {}, errorf(CodeExecFailed, err, "give service %s's socket to the sandbox", s.Name)
		}
		srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 30 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		inside := ServiceSocketDir + "/" + s.Name + ".sock"
		p.sockets = append(p.sockets, [2]string{host, inside})
		fmt.Fprintf(&script, "%s TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:%s &\n", socat, s.Port, inside)
		ready = append(ready, fmt.Sprintf("grep -q ' 0100007F:%04X 00000000:0000 0A' /proc/net/tcp", s.Port))
	}
	// The command starts once every forwarder listens (the socket table of
	// the sandbox's own namespace says so).
	fmt.Fprintf(&script, "i=0; until %s; do i=$((i+1)); if [ $i -gt %d ]; then echo 'sandbox: the service forwarder did not start' >&2; exit 125; fi; sleep 0.01; done\nexec \"$@\"",
		strings.Join(ready, " && "), forwardReadyTries)
	p.argv = append([]string{"/bin/sh", "-c", script.String(), "sh"}, p.argv...)
	return stop, nil
}

func validServiceName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
