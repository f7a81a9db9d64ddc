package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxOutputFileBytes caps the $SVC_OUTPUT file a step writes.
const MaxOutputFileBytes = 64 << 10

// Error codes of output contract violations, for step and run error_code.
const (
	CodeOutputTooLarge = "OUTPUT_TOO_LARGE"
	CodeOutputInvalid  = "OUTPUT_INVALID"
	CodeOutputMissing  = "OUTPUT_MISSING"
)

// OutputError is a violation of a job's output contract.
type OutputError struct {
	Code string
	Key  string
	Msg  string
}

func (e *OutputError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	return fmt.Sprintf("output %q: %s", e.Key, e.Msg)
}

// OutputErrorCode returns the code of an *OutputError in err's chain, or "".
func OutputErrorCode(err error) string {
	var oe *OutputError
	if errors.As(err, &oe) {
		return oe.Code
	}
	return ""
}

// StepName is a step's name, or "step-<n>" (1-based position in its task)
// for an unnamed step.
func StepName(t Task, index int) string {
	if name := t.Steps[index].Name; name != "" {
		return name
	}
	return fmt.Sprintf("step-%d", index+1)
}

// isWriter reports whether a step can write outputs at all.
func isWriter(s Step) bool { return s.Exec != nil || s.RunAgent != nil }

// Claims returns the output keys each step claims: task name → step name →
// sorted keys. A job whose only potential writer is one session run_agent
// step, with no step listing outputs, has that step claim every output key.
func Claims(m *JobManifest) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	explicit := false
	writers := 0
	var session *[2]int
	for i, t := range m.Run.Tasks {
		for j, s := range t.Steps {
			if s.Outputs != nil {
				explicit = true
			}
			if isWriter(s) {
				writers++
				if s.RunAgent != nil && s.RunAgent.Mode == AgentModeSession {
					session = &[2]int{i, j}
				}
			}
		}
	}
	if len(m.Outputs) > 0 && !explicit && writers == 1 && session != nil {
		t := m.Run.Tasks[session[0]]
		out[t.Name] = map[string][]string{StepName(t, session[1]): sortedKeys(m.Outputs)}
		return out
	}
	for _, t := range m.Run.Tasks {
		for j, s := range t.Steps {
			if s.Outputs == nil || len(s.Outputs.Claims) == 0 {
				continue
			}
			if out[t.Name] == nil {
				out[t.Name] = map[string][]string{}
			}
			out[t.Name][StepName(t, j)] = s.Outputs.Keys()
		}
	}
	return out
}

// ParseOutputFile reads the key=value lines a step wrote to $SVC_OUTPUT. The
// value after '=' is JSON; for outputs of type string a raw string is also
// accepted. Only claimed, declared keys are allowed and every value must fit
// its spec. Blank lines are ignored; a key written twice keeps the last value.
func ParseOutputFile(data []byte, specs map[string]JobOutputSpec, claimed []string) (map[string]any, error) {
	if len(data) > MaxOutputFileBytes {
		return nil, &OutputError{Code: CodeOutputTooLarge, Msg: fmt.Sprintf("output file is %d bytes, over the %d byte cap", len(data), MaxOutputFileBytes)}
	}
	allowed := map[string]bool{}
	for _, k := range claimed {
		allowed[k] = true
	}
	values := map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxOutputFileBytes+1)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			continue
		}
		key, raw, ok := strings.Cut(text, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return nil, &OutputError{Code: CodeOutputInvalid, Msg: fmt.Sprintf("line %d: expected key=value", line)}
		}
		spec, declared := specs[key]
		if !declared {
			return nil, &OutputError{Code: CodeOutputInvalid, Key: key, Msg: "is not declared in the job's outputs"}
		}
		if !allowed[key] {
			return nil, &OutputError{Code: CodeOutputInvalid, Key: key, Msg: "is not claimed by this step"}
		}
		val, err := decodeValue(raw)
		if err != nil {
			if spec.Type != TypeString {
				return nil, &OutputError{Code: CodeOutputInvalid, Key: key, Msg: fmt.Sprintf("line %d: value is not JSON: %v", line, err)}
			}
			val = raw
		} else if spec.Type == TypeString {
			if _, isString := val.(string); !isString {
				val = raw // a raw string that happens to parse as JSON, e.g. 42
			}
		}
		if err := CheckValue(spec.Spec(), val); err != nil {
			return nil, &OutputError{Code: CodeOutputInvalid, Key: key, Msg: err.Error()}
		}
		values[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, &OutputError{Code: CodeOutputInvalid, Msg: "reading output file: " + err.Error()}
	}
	return values, nil
}

// decodeValue decodes one JSON value, keeping whole numbers beyond 2^53
// exact (see Normalize).
func decodeValue(raw string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the value")
	}
	var ps Problems
	if checkNumbers(val, "", &ps); ps != nil {
		return nil, ps
	}
	return Normalize(val), nil
}

// OutputWrite is what one claiming step wrote.
type OutputWrite struct {
	Task      string
	TaskIndex int
	Step      string
	StepIndex int
	Succeeded bool
	Values    map[string]any
}

// ReduceOutputs publishes a job's outputs from its steps' writes, per each
// output's reduce rule (one, last, collect, gather), and checks required
// outputs are present. Writes of failed steps are ignored.
func ReduceOutputs(m *JobManifest, writes []OutputWrite) (map[string]any, error) {
	out := map[string]any{}
	ordered := make([]OutputWrite, 0, len(writes))
	for _, w := range writes {
		if w.Succeeded {
			ordered = append(ordered, w)
		}
	}
	// manifest task order, then step order
	for i := 1; i < len(ordered); i++ {
		for j := i; j > 0 && less(ordered[j], ordered[j-1]); j-- {
			ordered[j], ordered[j-1] = ordered[j-1], ordered[j]
		}
	}
	taskIndex := map[string]int{}
	for i, t := range m.Run.Tasks {
		taskIndex[t.Name] = i
	}
	for _, key := range sortedKeys(m.Outputs) {
		spec := m.Outputs[key]
		reduce := spec.Reduce
		if reduce == "" {
			reduce = ReduceOne
		}
		required := spec.Required == nil || *spec.Required
		var present []OutputWrite
		for _, w := range ordered {
			if _, ok := w.Values[key]; ok {
				present = append(present, w)
			}
		}
		switch reduce {
		case ReduceOne:
			if len(present) > 1 {
				return nil, &OutputError{Code: CodeOutputInvalid, Key: key, Msg: fmt.Sprintf("reduce one: written by %d steps", len(present))}
			}
			if len(present) == 1 {
				out[key] = present[0].Values[key]
			}
		case ReduceLast:
			if len(present) > 0 {
				out[key] = present[len(present)-1].Values[key]
			}
		case ReduceCollect:
			collected := make([]any, len(m.Run.Tasks))
			got := 0
			for _, w := range present {
				if i, ok := taskIndex[w.Task]; ok {
					if collected[i] == nil {
						got++
					}
					collected[i] = w.Values[key]
				}
			}
			if required && got < len(m.Run.Tasks) {
				return nil, &OutputError{Code: CodeOutputMissing, Key: key, Msg: fmt.Sprintf("required collect output written by %d of %d tasks", got, len(m.Run.Tasks))}
			}
			if got > 0 || required {
				out[key] = collected
			}
			continue
		case ReduceGather:
			gathered := []any{}
			for _, w := range present {
				if list, ok := w.Values[key].([]any); ok {
					gathered = append(gathered, list...)
				} else {
					gathered = append(gathered, w.Values[key])
				}
			}
			if len(present) > 0 {
				out[key] = gathered
			}
		}
		if _, ok := out[key]; !ok && required {
			return nil, &OutputError{Code: CodeOutputMissing, Key: key, Msg: "required output was not written"}
		}
	}
	return out, nil
}

func less(a, b OutputWrite) bool {
	if a.TaskIndex != b.TaskIndex {
		return a.TaskIndex < b.TaskIndex
	}
	return a.StepIndex < b.StepIndex
}
