package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

func defBool(p **bool, b bool) {
	if *p == nil {
		*p = new(b)
	}
}

func defInt(p **int, n int) {
	if *p == nil {
		*p = new(n)
	}
}

// NormalizeJob applies SPEC's defaults in place. It is idempotent.
func NormalizeJob(m *JobManifest) {
	for name, p := range m.Job.Params {
		defBool(&p.Required, false)
		m.Job.Params[name] = p
	}
	r := &m.Run
	defBool(&r.FailFast, true)
	defBool(&r.Fanout, false)
	defInt(&r.Concurrency, 1)
	normalizeSandbox(r.Sandbox)
	for i := range r.Tasks {
		normalizeSandbox(r.Tasks[i].Sandbox)
	}
	for name, o := range m.Outputs {
		defBool(&o.Required, true)
		if o.Reduce == "" {
			o.Reduce = ReduceOne
		}
		m.Outputs[name] = o
	}
	if s := m.Schedule; s != nil {
		if s.Timezone == "" {
			s.Timezone = "UTC"
		}
		defBool(&s.Enabled, true)
	}
	if v := m.Verification; v != nil {
		defBool(&v.Enabled, false)
	}
}

func normalizeSandbox(s *SandboxConfig) {
	if s == nil {
		return
	}
	if s.Mode == "" {
		s.Mode = SandboxProvision
	}
	defInt(&s.Vcpus, 2)
	defInt(&s.MemoryMB, 2048)
	defInt(&s.DiskGB, 10)
	defBool(&s.InternetEnabled, true)
	if s.Init != nil && s.Init.Type == "custom" {
		defBool(&s.Init.AwaitReady, false)
	}
}

// NormalizeLine applies SPEC's defaults in place. It is idempotent.
func NormalizeLine(m *LineManifest) {
	t := &m.Trigger
	switch t.Type {
	case TriggerSchedule:
		if t.Timezone == "" {
			t.Timezone = "UTC"
		}
	case TriggerIntegration:
		if t.Selector != nil && t.Selector.Kind == "" {
			t.Selector.Kind = selectorKinds[t.Provider]
		}
	}
}

// CanonicalJSON encodes v as JSON with object keys sorted at every level and
// no insignificant whitespace.
func CanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	// encoding/json sorts map keys; numbers keep their literal form.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// ContentHash is "sha256:" + the hex SHA-256 of v's canonical JSON. Hash a
// normalized manifest so the same manifest gets the same hash whatever format
// or key order it was written in.
func ContentHash(v any) (string, error) {
	b, err := CanonicalJSON(v)
	if err != nil {
		return "", fmt.Errorf("content hash: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
