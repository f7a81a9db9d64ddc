package main

import (
	"strings"
	"testing"

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
