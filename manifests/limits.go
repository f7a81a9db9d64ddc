package manifests

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Limits on manifests and runs, enforced at deploy, at run start and by
// `factoryd validate` (README "Limits"). They keep every valid job inside
// what the engine can hold (Temporal's history and payload limits) and keep
// a hostile document from costing more than its size.
const (
	// MaxManifestBytes bounds a manifest document.
	MaxManifestBytes = 1 << 20
	// MaxDepth bounds how deep tables (objects), arrays and dotted key
	// components nest in a manifest; checked on the raw text before parsing.
	MaxDepth = 64
	// MaxStepsPerTask bounds the steps of one task.
	MaxStepsPerTask = 5000
	// MaxStepsPerJob bounds the steps of all tasks of a job together. The
	// workflow history no longer bounds it (a run continues as new every
	// 500 steps, workflows/chain.go); the run record does: every step has
	// a timeline entry in it (about 2.4 MB at 5,000 steps), rewritten as the
	// step progresses.
	MaxStepsPerJob = 5000
	// MaxRunHistoryBytes bounds what a run's steps carry into its workflow
	// history: its params travel with every step (Temporal's history size
	// limit is 50 MB).
	MaxRunHistoryBytes = 32 << 20
	// MaxParamsBytes bounds the JSON encoding of a run's params (all of them).
	MaxParamsBytes = 256 << 10
	// MaxParamEnvBytes bounds one param as steps get it, the environment
	// string SVC_PARAM_<NAME>=<value>: Linux refuses to start a process
	// with a longer one (MAX_ARG_STRLEN, 128 KiB with its NUL), so every
	// step of the run would fail.
	MaxParamEnvBytes = 128<<10 - 1
	// MaxOutputBytes bounds one step's claimed output values (the output
	// file, SPEC "step output file cap").
	MaxOutputBytes = 64 << 10
)

// LimitError is a limit a document or a request exceeded: What names the
// limit, Path where in the document (empty for the whole of it), Limit the
// bound and Requested what was asked for. TooLarge marks the limits a
// request exceeds as a whole (its size: HTTP 413), the others are invalid
// content (422).
type LimitError struct {
	What      string
	Path      string
	Limit     int64
	Requested int64
	TooLarge  bool
}

func (e *LimitError) Error() string { return e.Problem().String() }

// Problem renders the limit as a manifest problem.
func (e *LimitError) Problem() Problem {
	return Problem{Path: e.Path, Message: fmt.Sprintf("%s is %d, more than the limit of %d", e.What, e.Requested, e.Limit)}
}

// CheckSize checks a manifest document's size and nesting depth before it
// is parsed; both checks take time linear in the size and constant memory
// (a stack of ints for TOML), whatever the nesting.
func CheckSize(data []byte, f Format) *LimitError {
	if len(data) > MaxManifestBytes {
		return &LimitError{What: "the manifest size in bytes", Limit: MaxManifestBytes, Requested: int64(len(data)), TooLarge: true}
	}
	var depth int
	switch f {
	case FormatTOML:
		depth = tomlDepth(data)
	default:
		depth = jsonDepth(data)
	}
	if depth > MaxDepth {
		return &LimitError{What: "the manifest nesting depth", Limit: MaxDepth, Requested: int64(depth)}
	}
	return nil
}

// CheckJobLimits checks a parsed job manifest's step counts.
func CheckJobLimits(m *JobManifest) *LimitError {
	total := 0
	for i, t := range m.Run.Tasks {
		if len(t.Steps) > MaxStepsPerTask {
			return &LimitError{What: "the number of steps in a task", Path: at("run.tasks", i) + ".steps",
				Limit: MaxStepsPerTask, Requested: int64(len(t.Steps))}
		}
		total += len(t.Steps)
	}
	if total > MaxStepsPerJob {
		return &LimitError{What: "the number of steps in a job", Path: "run.tasks", Limit: MaxStepsPerJob, Requested: int64(total)}
	}
	return nil
}

// CheckWrappedDepth checks the nesting depth of a manifest sent inside a
// JSON request body ({"manifest": {...}}), before the body is decoded.
func CheckWrappedDepth(body []byte) *LimitError {
	if depth := jsonDepth(body) - 1; depth > MaxDepth {
		return &LimitError{What: "the manifest nesting depth", Limit: MaxDepth, Requested: int64(depth)}
	}
	return nil
}

// jsonDepth returns the deepest nesting of objects and arrays in a JSON
// text (malformed text included: the parser reports that).
func jsonDepth(data []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth = max(depth-1, 0)
		}
	}
	return deepest
}

// tomlScan is the state of tomlDepth.
type tomlScan struct {
	data    []byte
	depth   int   // nesting of the table, array or inline table being read
	table   int   // nesting of the current [table] header
	parts   int   // components of the key being read
	inKey   bool  // reading a key (else a value)
	opened  []int // depth to return to when each open array or inline table closes
	kinds   []byte
	deepest int
}

// tomlDepth returns how deep tables, arrays and key components nest in a
// TOML text, counted as JSON nests the decoded document; malformed text is
// scanned as well as it goes (the parser reports it). It reads the text
// once, without parsing it: the TOML decoder itself costs time and memory
// quadratic in the nesting.
func tomlDepth(data []byte) int {
	s := &tomlScan{data: data, inKey: true}
	for i := 0; i < len(data); i++ {
		i = s.step(i)
	}
	return s.deepest
}

func (s *tomlScan) reach(d int) { s.deepest = max(s.deepest, d) }

// step reads the byte at i and returns the index of the last byte it read.
func (s *tomlScan) step(i int) int {
	switch c := s.data[i]; c {
	case '#':
		for i+1 < len(s.data) && s.data[i+1] != '\n' {
			i++
		}
	case '"', '\'':
		i = skipTOMLString(s.data, i)
		if s.inKey && s.parts == 0 {
			s.parts = 1
		}
	case '\n':
		if len(s.opened) == 0 {
			s.inKey, s.parts, s.depth = true, 0, s.table
		}
	case '.':
		if s.inKey {
			s.parts++
		}
	case '=':
		if s.inKey {
			s.inKey = false
			s.reach(s.depth + s.parts)
		}
	case '[', '{':
		if s.inKey && len(s.opened) == 0 && s.parts == 0 && c == '[' {
			return s.header(i)
		}
		s.open(c)
	case ',':
		if n := len(s.kinds); n > 0 && s.kinds[n-1] == '{' {
			s.inKey, s.parts = true, 0
		}
	case ']', '}':
		if n := len(s.opened); n > 0 {
			s.depth = s.opened[n-1]
			s.opened, s.kinds = s.opened[:n-1], s.kinds[:n-1]
			s.inKey = false
		}
	case ' ', '\t', '\r':
	default:
		if s.inKey && s.parts == 0 {
			s.parts = 1
		}
	}
	return i
}

// open enters an array or inline table that is a value: of the key just
// read, or an element of the enclosing array.
func (s *tomlScan) open(c byte) {
	s.opened = append(s.opened, s.depth)
	s.kinds = append(s.kinds, c)
	if s.parts > 0 {
		s.depth += s.parts
	} else {
		s.depth++
	}
	s.parts = 0
	s.reach(s.depth)
	if c == '[' {
		s.reach(s.depth + 1)
	}
	s.inKey = c == '{'
}

// header reads a [table] or [[array of tables]] header starting at i.
func (s *tomlScan) header(i int) int {
	n, parts := len(s.data), 1
	if i+1 < n && s.data[i+1] == '[' {
		parts++
		i++
	}
	for i++; i < n && s.data[i] != ']' && s.data[i] != '\n'; i++ {
		switch s.data[i] {
		case '"', '\'':
			i = skipTOMLString(s.data, i)
		case '.':
			parts++
		}
	}
	s.table, s.depth, s.parts = parts, parts, 0
	s.reach(parts)
	for i+1 < n && s.data[i+1] == ']' {
		i++
	}
	return i
}

// skipTOMLString returns the index of the quote that closes the string
// opening at i (basic, literal or multi-line), or the last index.
func skipTOMLString(data []byte, i int) int {
	q := data[i]
	n := len(data)
	multi := i+2 < n && data[i+1] == q && data[i+2] == q
	if multi {
		i += 2
	}
	for i++; i < n; i++ {
		switch c := data[i]; {
		case c == '\\' && q == '"':
			i++
		case c == q && (!multi || (i+2 < n && data[i+1] == q && data[i+2] == q)):
			if multi {
				i += 2
				for i+1 < n && data[i+1] == q { // up to two quotes end the content
					i++
				}
			}
			return i
		case c == '\n' && !multi:
			return i - 1
		}
	}
	return n - 1
}

// CheckParamsSize checks the size of a run's params (their JSON encoding)
// against MaxParamsBytes (params travel in the engine's workflow input,
// whose payload limit is a few MB), and each param as steps get it against
// MaxParamEnvBytes.
func CheckParamsSize(params map[string]any) *LimitError {
	if len(params) == 0 {
		return nil
	}
	raw, err := json.Marshal(params)
	if err == nil && len(raw) > MaxParamsBytes {
		return &LimitError{What: "the size of the params in bytes (JSON)", Path: "params", Limit: MaxParamsBytes, Requested: int64(len(raw)), TooLarge: true}
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		env := ParamEnvName(name)
		if n := len(env) + 1 + len(Stringify(params[name])); n > MaxParamEnvBytes {
			return &LimitError{What: "the size in bytes of the param as steps get it (" + env + "=<value>)", Path: "params." + name,
				Limit: MaxParamEnvBytes, Requested: int64(n), TooLarge: true}
		}
	}
	return nil
}

// CheckRunHistory checks that a run of m with params fits the engine's
// history: params (paramsBytes of JSON) travel with every step.
func CheckRunHistory(m *JobManifest, paramsBytes int) *LimitError {
	steps := 0
	for _, t := range m.Run.Tasks {
		steps += len(t.Steps)
	}
	return CheckStepsHistory(steps, paramsBytes)
}

// CheckStepsHistory is CheckRunHistory for a job of steps steps.
func CheckStepsHistory(steps, paramsBytes int) *LimitError {
	if n := int64(steps) * int64(paramsBytes); n > MaxRunHistoryBytes {
		return &LimitError{What: "the size of the params times the number of steps in bytes", Path: "params",
			Limit: MaxRunHistoryBytes, Requested: n, TooLarge: true}
	}
	return nil
}
