package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/linefactory/linefactory/activities/sandbox"
	"github.com/linefactory/linefactory/activities/sandbox/sandboxtest"
	"github.com/linefactory/linefactory/internal/testwait"
	"github.com/linefactory/linefactory/manifests/manifesttest"
	"github.com/linefactory/linefactory/manifests/run"
)

// The hostile-step suite: each step below is an attack a holder of a write
// token could run; the test shows the command, then asserts it did no harm.

// hostileJob is a one-step job running script (TOML-quoted) with the
// given sandbox settings.
func hostileJob(name, script, sandboxTOML string) string {
	return fmt.Sprintf("[job]\nname = %q\n[job.params.who]\ntype = \"string\"\ndefault = \"world\"\n"+
		"[run.sandbox]\nimage = \"any\"\n%s\n[[run.tasks]]\nname = \"t\"\n[[run.tasks.steps]]\nname = \"s\"\nexec = [%q]\n",
		name, sandboxTOML, script)
}

// stepLog returns a finished run's step output.
func (d *daemon) stepLog(id string) string {
	d.t.Helper()
	req, _ := http.NewRequest("GET", d.base+"/job-runs/"+id+"/logs?step=s", nil)
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer r.Body.Close()
	data, _ := io.ReadAll(r.Body)
	return string(data)
}

// waitFinishedRun waits for a run of job to succeed or fail and returns
// it (nil when none does within limit).
func (d *daemon) waitFinishedRun(job string, limit time.Duration) map[string]any {
	var done map[string]any
	testwait.UntilEvery(limit, 100*time.Millisecond, func() bool {
		for _, r := range d.list("/jobs/" + job + "/runs") {
			if r["status"] == "succeeded" || r["status"] == "failed" {
				done = r
				return true
			}
		}
		return false
	})
	return done
}

// attack deploys and runs a hostile step and returns its output.
func (d *daemon) attack(t *testing.T, name, script, sandboxTOML string, params map[string]any) (map[string]any, string) {
	t.Helper()
	t.Logf("attack %s: %s (params %v)", name, script, params)
	d.deploy(name, hostileJob(name, script, sandboxTOML))
	id := d.start(name, params)
	run := d.wait(id, 90*time.Second)
	out := d.stepLog(id)
	t.Logf("attack %s: status %v, output:\n%s", name, run["status"], out)
	return run, out
}

func requireIsolation(t *testing.T) {
	t.Helper()
	if err := sandbox.CheckIsolation(); err != nil {
		if strings.Contains(err.Error(), "not installed") {
			t.Fatalf("isolation tools missing (apt-get install bubblewrap slirp4netns): %v", err)
		}
		t.Skipf("SKIPPING: the kernel forbids the namespaces isolation needs: %v", err)
	}
}

func TestHostileSteps(t *testing.T) {
	requireIsolation(t)
	dataDir := t.TempDir()
	d := startDaemon(t, dataDir, nil)
	temporalAddr := ""
	for _, kv := range d.env {
		if v, ok := strings.CutPrefix(kv, "FACTORY_TEMPORAL_PORT="); ok {
			temporalAddr = "127.0.0.1:" + v
		}
	}
	_, port, _ := net.SplitHostPort(sandboxtest.Listen(t, "tcp", "127.0.0.1:0", "HOST-LOOPBACK-REACHED"))
	sock := sandboxtest.Listen(t, "unix", filepath.Join(t.TempDir(), "host.sock"), "HOST-SOCKET-REACHED")

	t.Run("environment", func(t *testing.T) {
		_, out := d.attack(t, "envthief", `tr '\0' '\n' </proc/$PPID/environ; cat /proc/1/environ /proc/*/environ 2>/dev/null | tr '\0' '\n'; env`, "", nil)
		if strings.Contains(out, e2eToken) || strings.Contains(out, "FACTORY_BOOTSTRAP_TOKEN") {
			t.Fatalf("the step read factoryd's secrets:\n%s", out)
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", d.cmd.Process.Pid))
		if strings.Contains(string(env), e2eToken) {
			t.Fatal("factoryd still holds FACTORY_BOOTSTRAP_TOKEN in its environment")
		}
	})
	t.Run("store", func(t *testing.T) {
		db := filepath.Join(dataDir, "factory.db")
		_, out := d.attack(t, "storethief", fmt.Sprintf(`head -c 16 %s; ls -la %s; echo x >> %s && echo WROTE`, db, dataDir, db), "", nil)
		if strings.Contains(out, "SQLite format") || strings.Contains(out, "WROTE") || strings.Contains(out, "total ") {
			t.Fatalf("the step opened the store:\n%s", out)
		}
		for path, want := range map[string]os.FileMode{dataDir: 0o700, db: 0o600} {
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
				t.Fatalf("%s: mode %v, want %v (%v)", path, st.Mode().Perm(), want, err)
			}
		}
	})
	for _, online := range []bool{true, false} {
		sbx := fmt.Sprintf("internet_enabled = %v", online)
		name := "net" + strconv.FormatBool(online)
		t.Run("temporal and host from "+name, func(t *testing.T) {
			script := sandboxtest.Script(sandboxtest.ReachHost, map[string]any{"addrs": []string{temporalAddr, "127.0.0.1:" + port, "10.0.2.2:" + port},
				"sockets": []string{sock, "/var/run/postgresql/.s.PGSQL.5432"}})
			_, out := d.attack(t, name, script, sbx, nil)
			for _, bad := range []string{"CONNECTED", "HOST-LOOPBACK-REACHED", "HOST-SOCKET-REACHED"} {
				if strings.Contains(out, bad) {
					t.Fatalf("the step reached the host (%s):\n%s", bad, out)
				}
			}
		})
	}
	t.Run("temporal without the key from a local process", func(t *testing.T) {
		// Steps cannot reach the frontend (above); a process of the host,
		// or a step under FACTORY_SANDBOX_ISOLATION=none, can, but has no key.
		d.deploy("longvictim", hostileJob("longvictim", "sleep 600", ""))
		id := d.start("longvictim", nil)
		waitFor(t, "the victim run running", time.Minute, func() map[string]any {
			_, m := d.call("GET", "/job-runs/"+id, "", nil)
			return m
		}, func(m map[string]any) bool { return m["status"] == "running" })
		runTemporalAttacker(t, temporalAddr, run.JobRunWorkflowID(id), run.LineScheduleID("nosuchline"))
		if _, m := d.call("GET", "/job-runs/"+id, "", nil); m["status"] != "running" {
			t.Fatalf("the victim run is %v after the attack", m["status"])
		}
		if code, m := d.call("POST", "/jobs/longvictim/runs/"+id+"/stop", "application/json", []byte(`{}`)); code >= 300 {
			t.Fatalf("stop: %d %v", code, m)
		}
		d.wait(id, time.Minute)
	})
	t.Run("another sandbox's workspace", func(t *testing.T) {
		keep := "mode = \"ensure\"\nname = \"victim\""
		if run, _ := d.attack(t, "victim", "echo TOP-SECRET > secret.txt", keep, nil); run["status"] != "succeeded" {
			t.Fatalf("victim: %v", run)
		}
		_, out := d.attack(t, "peeper", fmt.Sprintf(`cat %s/sandboxes/sandboxes/victim/workspace/secret.txt; cat /workspace/../*/secret.txt; find / -name secret.txt 2>/dev/null | xargs cat`, dataDir), "", nil)
		if strings.Contains(out, "TOP-SECRET") {
			t.Fatalf("the step read another sandbox's workspace:\n%s", out)
		}
	})
	t.Run("memory from a grandchild", func(t *testing.T) {
		run, out := d.attack(t, "hog", sandboxtest.Script(sandboxtest.GrandchildAlloc, nil), "memory_mb = 64", nil)
		if run["status"] == "succeeded" || strings.Contains(out, strconv.Itoa(300<<20)) {
			t.Fatalf("a grandchild allocated 300 MB in a 64 MB sandbox: %v\n%s", run["status"], out)
		}
	})
	t.Run("setsid survives a stop", func(t *testing.T) {
		marker := "sleep " + strconv.Itoa(1000+os.Getpid()%100000) // unique on this host
		script := sandboxtest.Script(sandboxtest.SetsidEscape, map[string]any{"marker": marker, "sleep": 616})
		t.Logf("attack survivor: %s", script)
		d.deploy("survivor", hostileJob("survivor", script, ""))
		id := d.start("survivor", nil)
		if !testwait.UntilEvery(60*time.Second, 50*time.Millisecond, func() bool { return len(processesWith(marker)) > 0 }) {
			t.Fatal("the step never started")
		}
		if code, m := d.call("POST", "/jobs/survivor/runs/"+id+"/stop", "application/json", []byte(`{}`)); code >= 300 {
			t.Fatalf("stop: %d %v", code, m)
		}
		d.wait(id, 60*time.Second)
		if !testwait.UntilEvery(10*time.Second, 50*time.Millisecond, func() bool { return len(processesWith(marker)) == 0 }) {
			t.Fatalf("setsid sleep survived the stop: %v", processesWith(marker))
		}
	})
	t.Run("code through a param", func(t *testing.T) {
		evil := `x; echo PWNED-1; $(echo PWNED-2) "' ` + "`echo PWNED-3`"
		_, out := d.attack(t, "inject", `echo "hello {{who}}"; echo hello {{who}}; echo 'hello {{who}}'`, "", map[string]any{"who": evil})
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "PWNED") && !strings.Contains(line, "hello "+evil) {
				t.Fatalf("the param ran as code:\n%s", out)
			}
		}
		if strings.Count(out, "hello "+evil) != 3 {
			t.Fatalf("the param was not printed as text three times:\n%s", out)
		}
	})
	t.Run("code through a schedule input", func(t *testing.T) {
		d.deploy("greeter", hostileJob("greeter", "echo hello {{who}}; echo greeting=x >> $SVC_OUTPUT", ""))
		evil := "$(echo PWNED-SCHEDULE)"
		line := manifesttest.OneStageLine("cronattack", fmt.Sprintf("type = \"schedule\"\ncron = \"0 3 * * *\"\ninputs = { who = %q }", evil), "s", "greeter")
		t.Logf("attack schedule input: who = %s", evil)
		if code, m := d.call("POST", "/factory/lines/cronattack/deploy", "application/toml", []byte(line)); code != 201 {
			t.Fatalf("deploy: %d %v", code, m)
		}
		c := temporalClient(t, d)
		if err := c.ScheduleClient().GetHandle(context.Background(), run.LineScheduleID("cronattack")).Trigger(context.Background(), client.ScheduleTriggerOptions{}); err != nil {
			t.Fatal(err)
		}
		r := d.waitFinishedRun("greeter", 60*time.Second)
		if r == nil {
			t.Fatal("the scheduled run did not finish")
		}
		out := d.stepLog(r["id"].(string))
		t.Logf("output:\n%s", out)
		if !strings.Contains(out, "hello "+evil) || strings.Contains(out, "hello PWNED") {
			t.Fatalf("the schedule input ran as code:\n%s", out)
		}
	})
	t.Run("code through a trigger-mapped value", func(t *testing.T) {
		d.deploy("chatvictim", hostileJob("chatvictim", `echo "hello {{who}}"; echo hello {{who}}`, ""))
		line := manifesttest.OneStageLine("chatattack", "type = \"integration_trigger\"\nname = \"chat\"\nprovider = \"chat_tool\"\n"+
			"selector = { kind = \"channel\", scope = \"all\" }\noutputs = { who = { type = \"trigger_path\", path = \"body.text\" } }", "s", "chatvictim")
		if code, m := d.call("POST", "/factory/lines/chatattack/deploy", "application/toml", []byte(line)); code != 201 {
			t.Fatalf("deploy: %d %v", code, m)
		}
		evil := "$(echo PWNED-EVENT) `echo PWNED-TICK`; echo PWNED-SEMI"
		body, _ := json.Marshal(map[string]any{"channel": "#general", "user": "stranger", "text": evil})
		t.Logf("attack integration event: chat_tool text = %s", evil)
		req, _ := http.NewRequest("POST", d.base+"/factory/integrations/chat_tool/events", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e2eToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Event-Name", "message")
		req.Header.Set("X-Delivery-Id", "chat-attack-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || !strings.Contains(string(answer), "chatattack") {
			t.Fatalf("the event started no run of chatattack: %d %s", resp.StatusCode, answer)
		}
		r := d.waitFinishedRun("chatvictim", 90*time.Second)
		if r == nil {
			t.Fatal("the event's run did not finish")
		}
		out := d.stepLog(r["id"].(string))
		t.Logf("status %v, output:\n%s", r["status"], out)
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "PWNED") && !strings.Contains(l, "hello "+evil) {
				t.Fatalf("the trigger-mapped value ran as code:\n%s", out)
			}
		}
		if strings.Count(out, "hello "+evil) != 2 {
			t.Fatalf("the trigger-mapped value was not printed as text twice:\n%s", out)
		}
	})
	t.Run("no leaks", func(t *testing.T) {
		boxes := filepath.Join(dataDir, "sandboxes", "sandboxes")
		entries, _ := os.ReadDir(boxes)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".spare-") {
				// a deleted sandbox's directory kept for the next one
				// (the sandbox driver's sparedirs.go): nothing in it
				var in []string
				_ = filepath.WalkDir(filepath.Join(boxes, e.Name()), func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						in = append(in, p)
					}
					return nil
				})
				if len(in) > 0 {
					t.Errorf("a spare sandbox directory holds %v", in)
				}
			} else if e.Name() != "victim" { // ensure: kept on purpose
				t.Errorf("a finished run left its provision sandbox %s", e.Name())
			}
		}
		sum := sha256.Sum256([]byte(filepath.Join(dataDir, "sandboxes")))
		prefix := hex.EncodeToString(sum[:4]) + "-"
		var left []string
		// an idle sandbox keeps its groups for a couple of seconds (the
		// sandbox driver's cgroupLinger), for the steps that follow
		testwait.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
			left = nil
			for _, c := range []string{"freezer", "memory", "pids", "cpu", ""} {
				groups, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", c, "linefactory"))
				for _, g := range groups {
					if g.IsDir() && strings.HasPrefix(g.Name(), prefix) {
						left = append(left, filepath.Join(c, "linefactory", g.Name()))
					}
				}
			}
			return len(left) == 0
		})
		for _, g := range left {
			t.Errorf("finished runs left cgroup %s", g)
		}
	})
}
