package cli

import (
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasExamples: --help of every command shows examples.
func TestEveryCommandHasExamples(t *testing.T) {
	a := &App{}
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Name() != "help" && c.Example == "" {
			t.Errorf("%q has no examples", c.CommandPath())
		}
		n++
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(a.rootCommand())
	if n < 30 {
		t.Fatalf("only %d commands walked", n)
	}
}

func TestTypedValue(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		typ  paramType
		want string
	}{
		{"3", paramType{typ: "integer"}, "3"},
		{"1.5", paramType{typ: "number"}, "1.5"},
		{"true", paramType{typ: "boolean"}, "true"},
		{"a, b", paramType{typ: "array", items: "string"}, "[a b]"},
		{"1,2", paramType{typ: "array", items: "integer"}, "[1 2]"},
		{`["x",1]`, paramType{typ: "array"}, "[x 1]"},
		{"plain", paramType{typ: "string"}, "plain"},
	} {
		v, err := typedValue(tc.raw, tc.typ)
		if err != nil {
			t.Fatalf("%q as %v: %v", tc.raw, tc.typ, err)
		}
		if got := fmtValue(v); got != tc.want {
			t.Fatalf("%q as %v = %s, want %s", tc.raw, tc.typ, got, tc.want)
		}
	}
	for _, bad := range []paramType{{typ: "integer"}, {typ: "boolean"}, {typ: "number"}} {
		if _, err := typedValue("x", bad); err == nil {
			t.Fatalf("x as %v: no error", bad)
		}
	}
}

func fmtValue(v any) string { return fmt.Sprint(v) }
