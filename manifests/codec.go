package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// USD is an amount of US dollars held in whole cents. It is accepted as a JSON
// number or a decimal string and written as a decimal string ("25.50").
type USD struct {
	Cents int64
}

// String renders the amount as a decimal string with two places.
func (u USD) String() string {
	sign := ""
	c := u.Cents
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

// ParseUSD reads a decimal amount such as "25.5" or "3"; more than two decimal
// places are rounded half away from zero to whole cents.
func ParseUSD(s string) (USD, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return USD{}, fmt.Errorf("%q is not a decimal amount", s)
	}
	return USD{Cents: int64(math.Round(f * 100))}, nil
}

// MarshalJSON writes the amount as a decimal string.
func (u USD) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }

// UnmarshalJSON accepts a number or a decimal string.
func (u *USD) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	s := string(b)
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := ParseUSD(s)
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// Keys returns the claimed output keys, sorted.
func (o *StepOutputs) Keys() []string {
	if o == nil {
		return nil
	}
	keys := make([]string, 0, len(o.Claims))
	for k := range o.Claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MarshalJSON writes the authored form: a list of keys or a table.
func (o StepOutputs) MarshalJSON() ([]byte, error) {
	if o.List {
		keys := o.Keys()
		return json.Marshal(keys)
	}
	if o.Claims == nil {
		return []byte("{}"), nil
	}
	return json.Marshal(o.Claims)
}

// UnmarshalJSON accepts a list of key names or a table keyed by output key.
func (o *StepOutputs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var keys []string
		if err := json.Unmarshal(b, &keys); err != nil {
			return fmt.Errorf("outputs: a list of output key names: %w", err)
		}
		o.List = true
		o.Claims = make(map[string]StepOutputClaim, len(keys))
		for _, k := range keys {
			o.Claims[k] = StepOutputClaim{}
		}
		if len(o.Claims) != len(keys) {
			return fmt.Errorf("outputs: duplicate output key in list")
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var claims map[string]StepOutputClaim
	if err := dec.Decode(&claims); err != nil {
		return fmt.Errorf("outputs: a list of key names or a table of {from, required}: %w", err)
	}
	o.List = false
	o.Claims = claims
	return nil
}
