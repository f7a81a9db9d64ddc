package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linefactory/linefactory/activities"
)

func TestConfigCostRates(t *testing.T) {
	c, err := loadConfig("serve", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rates != activities.DefaultCostRates {
		t.Fatalf("default rates %+v, want %+v", c.Rates, activities.DefaultCostRates)
	}
	t.Setenv("FACTORY_CENTS_PER_VCPU_HOUR", "12.5")
	t.Setenv("FACTORY_CENTS_PER_GB_HOUR", "2")
	if c, err = loadConfig("serve", nil); err != nil || c.Rates != (activities.CostRates{CentsPerVCPUHour: 12.5, CentsPerGBHour: 2}) {
		t.Fatalf("rates from the environment: %+v %v", c.Rates, err)
	}
	if c, err = loadConfig("serve", []string{"--cents-per-gb-hour", "0"}); err != nil || c.Rates.CentsPerGBHour != 0 || c.Rates.CentsPerVCPUHour != 12.5 {
		t.Fatalf("a flag over the environment: %+v %v", c.Rates, err)
	}
	for _, bad := range []string{"-1", "abc", "NaN", "Inf"} {
		if _, err := loadConfig("serve", []string{"--cents-per-vcpu-hour", bad}); err == nil || !strings.Contains(err.Error(), "--cents-per-vcpu-hour") {
			t.Errorf("rate %q: %v, want an error naming the flag", bad, err)
		}
	}
}

func TestConfigTopology(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--roles", "api,worker"}, true},
		{[]string{"--roles", "api"}, false},
		{[]string{"--roles", "worker"}, false},
		{[]string{"--roles", "api", "--temporal-address", "temporal:7233"}, true},
		{[]string{"--roles", "worker", "--temporal-address", "temporal:7233"}, true},
	}
	for _, tc := range cases {
		c, err := loadConfig("serve", tc.args)
		if err != nil {
			t.Fatal(err)
		}
		err = c.checkTopology()
		if (err == nil) != tc.ok {
			t.Errorf("%v: %v, want ok=%v", tc.args, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "TEMPORAL_ADDRESS") {
			t.Errorf("%v: error %q does not say what to set", tc.args, err)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.toml"
	bad := dir + "/bad.toml"
	if err := os.WriteFile(good, []byte("[harnesses.agent_a]\ncommand = [\"agent-a\", \"--prompt-file={{prompt_file}}\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("[harnesses.agent_a]\ncommand = [\"agent-a\"]\nefforts = \"high\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig("serve", nil)
	if err != nil || c.Agents != nil {
		t.Fatalf("no file: %+v %v", c.Agents, err)
	}
	if c, err = loadConfig("serve", []string{"--config", good}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Agents.Harness("agent_a"); !ok {
		t.Fatalf("agent_a not configured: %+v", c.Agents)
	}
	t.Setenv("FACTORY_CONFIG", good)
	if c, err = loadConfig("serve", nil); err != nil || c.Agents == nil {
		t.Fatalf("FACTORY_CONFIG: %+v %v", c.Agents, err)
	}
	_, err = loadConfig("serve", []string{"--config", bad})
	if err == nil || !strings.Contains(err.Error(), bad+": harnesses.agent_a.efforts: expected an array of strings") {
		t.Fatalf("bad file: %v, want file, key and reason", err)
	}
	if _, err = loadConfig("serve", []string{"--config", dir + "/missing.toml"}); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestPoolFromEnv: the store pool variables override the defaults and bad
// values are refused.
func TestPoolFromEnv(t *testing.T) {
	t.Setenv("FACTORY_DB_MAX_OPEN_CONNS", "8")
	t.Setenv("FACTORY_DB_MAX_IDLE_CONNS", "4")
	t.Setenv("FACTORY_DB_CONN_MAX_LIFETIME", "10m")
	t.Setenv("FACTORY_DB_CONN_MAX_IDLE_TIME", "0")
	t.Setenv("FACTORY_SQLITE_READERS", "0")
	t.Setenv("FACTORY_FINISHED_RUN_CACHE_TTL", "0")
	p, err := poolFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxOpenConns != 8 || p.MaxIdleConns != 4 || p.ConnMaxLifetime != 10*time.Minute || p.ConnMaxIdleTime != 0 || p.SQLiteReaders != 0 || p.FinishedRunCacheTTL != 0 {
		t.Fatalf("pool %+v", p)
	}
	for name, bad := range map[string]string{"FACTORY_DB_MAX_OPEN_CONNS": "0", "FACTORY_DB_MAX_IDLE_CONNS": "-1",
		"FACTORY_DB_CONN_MAX_LIFETIME": "soon", "FACTORY_SQLITE_READERS": "x", "FACTORY_FINISHED_RUN_CACHE_TTL": "-1s"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, bad)
			if _, err := poolFromEnv(); err == nil || !strings.Contains(err.Error(), name) && !strings.Contains(err.Error(), "at least 1") {
				t.Fatalf("%s=%s: %v", name, bad, err)
			}
		})
	}
}

func TestConfigConcurrentReads(t *testing.T) {
	for _, c := range []struct {
		env, flag string
		want      int
	}{{"", "", 0}, {"16", "", 16}, {"16", "0", -1}, {"", "3", 3}} {
		t.Setenv("FACTORY_MAX_CONCURRENT_READS", c.env)
		var args []string
		if c.flag != "" {
			args = []string{"--max-concurrent-reads", c.flag}
		}
		cfg, err := loadConfig("serve", args)
		if err != nil || cfg.MaxConcurrentReads != c.want {
			t.Errorf("env %q flag %q: %d %v, want %d", c.env, c.flag, cfg.MaxConcurrentReads, err, c.want)
		}
	}
	for _, bad := range []string{"-1", "x", "1.5"} {
		if _, err := loadConfig("serve", []string{"--max-concurrent-reads", bad}); err == nil || !strings.Contains(err.Error(), "--max-concurrent-reads") {
			t.Errorf("%q: %v, want an error naming the flag", bad, err)
		}
	}
}
