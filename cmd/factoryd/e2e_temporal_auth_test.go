package main

// The embedded Temporal server is not a side door: a local process without
// the key of this start can neither list, terminate nor signal workflows on
// the frontend, and no other port of the server speaks gRPC without the
// server's own certificate; factoryd's runs, Temporal Schedules and the Web
// UI keep working.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/linefactory/linefactory/manifests/run"
	"github.com/linefactory/linefactory/workflows"
)

// attackTemporal is what a local process without the key tries on the
// frontend at addr: list every workflow, terminate and signal (stop) the
// workflow wf, delete a schedule, with no key and with a guessed one. Each
// line is "<what>: <outcome>", "OK" when it got through.
func attackTemporal(addr, wf, schedule string) []string {
	var out []string
	for _, key := range []string{"", "guessed-key"} {
		opts := client.Options{HostPort: addr, Namespace: "default"}
		if key != "" {
			opts.Credentials = client.NewAPIKeyStaticCredentials(key)
			opts.ConnectionOptions.TLSDisabled = true
		}
		c, err := client.Dial(opts)
		if err != nil {
			out = append(out, fmt.Sprintf("dial (key %q): %v", key, err))
			continue
		}
		ctx := context.Background()
		res := func(what string, err error) {
			outcome := "OK"
			if err != nil {
				outcome = err.Error()
				var denied *serviceerror.PermissionDenied
				if errors.As(err, &denied) {
					outcome = "PermissionDenied: " + outcome
				}
			}
			out = append(out, fmt.Sprintf("%s (key %q): %s", what, key, outcome))
		}
		_, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: "default"})
		res("list", err)
		res("terminate", c.TerminateWorkflow(ctx, wf, "", "attack"))
		res("signal stop", c.SignalWorkflow(ctx, wf, "", workflows.StopSignal, map[string]string{"code": "STOPPED_BY_ATTACKER"}))
		res("delete schedule", c.ScheduleClient().GetHandle(ctx, schedule).Delete(ctx))
		c.Close()
	}
	return out
}

// temporalAttacker is the test binary run as a plain local process that
// attacks the frontend (FACTORYD_E2E_ATTACK=temporal).
func temporalAttacker() int {
	for _, line := range attackTemporal(os.Getenv("ATTACK_ADDR"), os.Getenv("ATTACK_WORKFLOW"), os.Getenv("ATTACK_SCHEDULE")) {
		fmt.Println(line)
	}
	return 0
}

// runTemporalAttacker runs the attack as a process of its own and asserts
// that every attempt was denied.
func runTemporalAttacker(t *testing.T, addr, wf, schedule string) {
	t.Helper()
	t.Logf("attack: a local process without the key lists, terminates and signals %s, deletes %s on %s", wf, schedule, addr)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FACTORYD_E2E_ATTACK=temporal", "ATTACK_ADDR="+addr, "ATTACK_WORKFLOW="+wf, "ATTACK_SCHEDULE="+schedule)
	out, err := cmd.CombinedOutput()
	t.Logf("attacker output:\n%s", out)
	if err != nil {
		t.Fatalf("attacker: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 8 {
		t.Fatalf("attacker made %d attempts, want 8", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, "PermissionDenied") {
			t.Fatalf("an attempt was not denied: %s", l)
		}
	}
}

// daemonEnv is the value of one of the daemon's variables.
func (d *daemon) envValue(name string) string {
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// listeningPorts are the TCP ports process pid listens on.
func listeningPorts(t *testing.T, pid int) []int {
	t.Helper()
	out, err := exec.Command("ss", "-Htlnp").Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	var ports []int
	re := regexp.MustCompile(`:(\d+)\s.*pid=` + strconv.Itoa(pid) + `,`)
	for _, l := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			ports = append(ports, p)
		}
	}
	return ports
}

// grpcHealth asks the gRPC health service at addr, in clear or over TLS
// without a client certificate.
func grpcHealth(addr string, useTLS bool) error {
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the attacker does not care who answers
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// uiGet GETs a path of the Web UI and decodes its JSON.
func uiGet(t *testing.T, ui, path string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(ui + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, m
}

// uiPost POSTs to the Web UI as its page would (with the CSRF cookie and
// header).
func uiPost(t *testing.T, ui, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(ui + "/api/v1/settings")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest("POST", ui+path, strings.NewReader(`{}`))
	for _, c := range resp.Cookies() {
		req.AddCookie(c)
		if c.Name == "_csrf" {
			req.Header.Set("X-CSRF-Token", c.Value)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func TestEndToEndTemporalAuth(t *testing.T) {
	d := startDaemon(t, t.TempDir(), nil)
	frontend := "127.0.0.1:" + d.envValue("FACTORY_TEMPORAL_PORT")
	ui := "http://" + d.envValue("FACTORY_TEMPORAL_UI_ADDR")
	d.deploy("sleeper", "[job]\nname = \"sleeper\"\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nexec = [\"sleep\", \"600\"]\n")
	d.deploy("tick", strings.Replace(greetJob, `name = "greet"`, `name = "tick"`, 1)+"[schedule]\ncron = \"0 3 * * *\"\n")
	victim := d.start("sleeper", nil)
	waitFor(t, "the victim run running", time.Minute, func() map[string]any {
		_, m := d.call("GET", "/job-runs/"+victim, "", nil)
		return m
	}, func(m map[string]any) bool { return m["status"] == "running" })
	wf := run.JobRunWorkflowID(victim)

	runTemporalAttacker(t, frontend, wf, run.JobScheduleID("tick"))
	if _, m := d.call("GET", "/job-runs/"+victim, "", nil); m["status"] != "running" {
		t.Fatalf("the victim run is %v after the attack", m["status"])
	}

	t.Run("no other port speaks gRPC without the server's certificate", func(t *testing.T) {
		public := map[string]bool{strings.TrimPrefix(d.base, "http://"): true, frontend: true, strings.TrimPrefix(ui, "http://"): true}
		others := 0
		answered := make(chan string)
		for _, p := range listeningPorts(t, d.cmd.Process.Pid) {
			addr := "127.0.0.1:" + strconv.Itoa(p)
			if public[addr] {
				continue
			}
			others++
			for _, useTLS := range []bool{false, true} {
				go func() {
					if err := grpcHealth(addr, useTLS); err == nil {
						answered <- fmt.Sprintf("%s (TLS %v)", addr, useTLS)
						return
					}
					answered <- ""
				}()
			}
		}
		for range 2 * others {
			if a := <-answered; a != "" {
				t.Errorf("%s answered a gRPC health check without the server's certificate", a)
			}
		}
		t.Logf("checked %d ports besides the API, the frontend and the UI", others)
		// internal frontend, history, matching, worker and their membership ports
		if others < 4 {
			t.Fatalf("found %d internal ports, want at least 4", others)
		}
		if err := grpcHealth(frontend, false); err != nil {
			t.Fatalf("the frontend's health check: %v", err)
		}
	})

	t.Run("Temporal Schedules fire", func(t *testing.T) {
		// Triggered now instead of at 03:00: the server's scheduler starts the
		// workflow through the internal frontend.
		if err := temporalClient(t, d).ScheduleClient().GetHandle(context.Background(), run.JobScheduleID("tick")).
			Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the scheduled run", time.Minute, func() map[string]any {
			runs := d.list("/jobs/tick/runs")
			if len(runs) == 0 {
				return nil
			}
			return runs[0]
		}, func(m map[string]any) bool { return m != nil && m["status"] == "succeeded" })
	})

	t.Run("the Web UI reads but does not write", func(t *testing.T) {
		code, list := uiGet(t, ui, "/api/v1/namespaces/default/workflows")
		if code != 200 || !strings.Contains(jsonString(list), wf) {
			t.Fatalf("UI workflow list: %d %v", code, list)
		}
		code, desc := uiGet(t, ui, "/api/v1/namespaces/default/workflows/"+url.PathEscape(wf))
		runID, _ := desc["workflowExecutionInfo"].(map[string]any)["execution"].(map[string]any)["runId"].(string)
		if code != 200 || runID == "" {
			t.Fatalf("UI describe: %d %v", code, desc)
		}
		resp, err := http.Get(ui + "/api/v1/namespaces/default/workflows/" + url.PathEscape(wf) + "/run/" + runID + "/history.json")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(raw), "WorkflowExecutionStartedEventAttributes") {
			t.Fatalf("UI raw history: %s", raw)
		}
		t.Logf("attack: POST terminate through the UI")
		if code, body := uiPost(t, ui, "/api/v1/namespaces/default/workflows/"+url.PathEscape(wf)+"/terminate"); code < 400 {
			t.Fatalf("the UI terminated a workflow: %d %s", code, body)
		}
		// The UI lets POSTs whose path looks like a query through; the
		// frontend still refuses the UI's key anything but reading.
		t.Logf("attack: a signal through the UI, its name made to look like a query")
		if code, body := uiPost(t, ui, "/api/v1/namespaces/default/workflows/"+url.PathEscape(wf)+"/signal/x%2Fquery%2Fy"); code != http.StatusForbidden ||
			!strings.Contains(body, "Request unauthorized") {
			t.Fatalf("a signal through the UI: %d %s, want 403 from the frontend", code, body)
		}
	})

	if code, m := d.call("POST", "/jobs/sleeper/runs/"+victim+"/stop", "application/json", []byte(`{}`)); code >= 300 {
		t.Fatalf("stop: %d %v", code, m)
	}
	if r := d.wait(victim, time.Minute); r["status"] == "running" {
		t.Fatalf("victim: %v", r)
	}
}
