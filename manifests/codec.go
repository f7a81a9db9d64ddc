package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
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

// MaxUSD is the largest amount ParseUSD accepts, in dollars.
const MaxUSD = 1_000_000_000_000

// ParseUSD reads a decimal amount in dollars such as "25.5", "3" or "1e3". An
// amount with more than two decimal places (finer than a cent) or larger than
// MaxUSD in magnitude is an error, never rounded.
func ParseUSD(s string) (USD, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.Trim(s, "0123456789.eE+-") != "" {
		return USD{}, fmt.Errorf("%q is not a decimal amount", s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return USD{}, fmt.Errorf("%q is not a decimal amount", s)
	}
	if new(big.Rat).Abs(r).Cmp(big.NewRat(MaxUSD, 1)) > 0 {
		return USD{}, fmt.Errorf("%q is over the maximum of %d dollars", s, int64(MaxUSD))
	}
	cents := r.Mul(r, big.NewRat(100, 1))
	if !cents.IsInt() {
		return USD{}, fmt.Errorf("%q has more than two decimal places (whole cents only)", s)
	}
	return USD{Cents: cents.Num().Int64()}, nil
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
