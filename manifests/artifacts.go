package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/url"
	"sort"
	"strings"
)

// ProviderURL is the external_ref variant of a plain URL (the other
// providers are the integration providers).
const ProviderURL = "url"

// ArtifactError is a bad $SVC_ARTIFACTS line: its number and field.
type ArtifactError struct {
	Line  int
	Field string
	Msg   string
}

func (e *ArtifactError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("$SVC_ARTIFACTS line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("$SVC_ARTIFACTS line %d: %s: %s", e.Line, e.Field, e.Msg)
}

type refField struct {
	name string
	kind string // string, integer, host
	req  bool
}

// refVariant is what an external_ref of one provider holds.
type refVariant struct {
	fields      []refField
	kind        string // default kind; "" = kind required
	fixedKind   bool
	displayHint bool
}

var refVariants = map[string]refVariant{
	ProviderCodeHost:      {fields: []refField{{"kind", "string", true}, {"id", "string", false}, {"node_id", "string", false}, {"owner", "string", false}, {"repo", "string", false}, {"number", "integer", false}}},
	ProviderSvc:           {fields: []refField{{"slug", "string", true}}, kind: "knowledge_item", fixedKind: true},
	ProviderIssueTrackerB: {fields: []refField{{"id", "string", false}, {"key", "string", false}, {"project", "string", false}, {"site", "host", false}}, kind: "issue"},
	ProviderIssueTrackerA: {fields: []refField{{"id", "string", false}, {"identifier", "string", false}, {"issue_id", "string", false}, {"team", "string", false}}, kind: "issue"},
	ProviderChatTool:      {fields: []refField{{"channel", "string", true}, {"ts", "string", true}}, kind: "message", fixedKind: true},
	ProviderURL:           {fields: []refField{{"url", "public_url", true}}, kind: "url", fixedKind: true, displayHint: true},
}

// ParseArtifacts reads ArtifactRef JSON lines (SPEC). Each line is checked
// strictly: unknown keys, wrong types, a provider that differs from
// external_ref.provider, a url that is not a public http(s) URL, an
// icon_url that is not https, an svc slug that does not exist
// (svcExists). Defaults are applied (kind). The first bad line is an
// *ArtifactError naming the line and the field.
func ParseArtifacts(data []byte, svcExists func(slug string) bool) ([]map[string]any, error) {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		ref, err := parseArtifact([]byte(text), svcExists)
		if err != nil {
			err.Line = n
			return nil, err
		}
		out = append(out, ref)
	}
	if err := sc.Err(); err != nil {
		return nil, &ArtifactError{Line: n + 1, Msg: err.Error()}
	}
	return out, nil
}

// artifactErr is a problem with an artifact reference's field.
func artifactErr(field, format string, args ...any) *ArtifactError {
	return &ArtifactError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func parseArtifact(line []byte, svcExists func(string) bool) (map[string]any, *ArtifactError) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var ref map[string]any
	if err := dec.Decode(&ref); err != nil || ref == nil {
		return nil, artifactErr("", "not a JSON object")
	}
	if err := checkArtifactFields(ref); err != nil {
		return nil, err
	}
	ext, ok := ref["external_ref"].(map[string]any)
	if !ok {
		return nil, artifactErr("external_ref", "is required (an object)")
	}
	provider, _ := ext["provider"].(string)
	variant, known := refVariants[provider]
	if !known {
		names := make([]string, 0, len(refVariants))
		for p := range refVariants {
			names = append(names, p)
		}
		sort.Strings(names)
		return nil, artifactErr("external_ref.provider", "must be one of %s", strings.Join(names, ", "))
	}
	if ref["provider"] != provider {
		return nil, artifactErr("provider", "%q must equal external_ref.provider %q", ref["provider"], provider)
	}
	if err := checkExternalRef(ext, provider, variant); err != nil {
		return nil, err
	}
	kind, hasKind := ext["kind"]
	switch {
	case !hasKind || kind == nil:
		if variant.kind != "" {
			ext["kind"] = variant.kind
		}
	case variant.fixedKind && kind != variant.kind:
		return nil, artifactErr("external_ref.kind", "must be %q for provider %s", variant.kind, provider)
	}
	if provider == ProviderSvc && svcExists != nil {
		if slug := ext["slug"].(string); !svcExists(slug) {
			return nil, artifactErr("external_ref.slug", "knowledge item %q does not exist", slug)
		}
	}
	return normalizeNumbers(ref).(map[string]any), nil
}

// checkArtifactFields checks an artifact reference's own fields (all but
// external_ref's content).
func checkArtifactFields(ref map[string]any) *ArtifactError {
	for _, k := range sortedKeys(ref) {
		switch k {
		case "type", "provider", "external_ref", "operation", "url", "title", "status", "metadata":
		default:
			return artifactErr(k, "unknown key")
		}
	}
	for _, k := range []string{"type", "provider"} {
		s, ok := ref[k].(string)
		if !ok || strings.TrimSpace(s) == "" {
			return artifactErr(k, "is required (a non-empty string)")
		}
	}
	for _, k := range []string{"operation", "title", "status"} {
		if v, ok := ref[k]; ok && v != nil {
			if _, isStr := v.(string); !isStr {
				return artifactErr(k, "must be a string")
			}
		}
	}
	if v, ok := ref["url"]; ok && v != nil {
		s, isStr := v.(string)
		if !isStr {
			return artifactErr("url", "must be a string")
		}
		if msg := publicURL(s, false); msg != "" {
			return artifactErr("url", "%s", msg)
		}
	}
	if v, ok := ref["metadata"]; ok && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			return artifactErr("metadata", "must be an object")
		}
	}
	return nil
}

// checkExternalRef checks the keys of an external_ref of provider against
// its variant: known keys, values of their kind, required keys present.
func checkExternalRef(ext map[string]any, provider string, variant refVariant) *ArtifactError {
	allowed := map[string]refField{"provider": {"provider", "string", true}, "kind": {"kind", "string", false}}
	if variant.displayHint {
		allowed["display_hint"] = refField{"display_hint", "hint", false}
	}
	for _, f := range variant.fields {
		allowed[f.name] = f
	}
	for _, k := range sortedKeys(ext) {
		f, ok := allowed[k]
		field := "external_ref." + k
		if !ok {
			return artifactErr(field, "unknown key for provider %s", provider)
		}
		v := ext[k]
		if v == nil {
			if f.req {
				return artifactErr(field, "is required")
			}
			continue
		}
		if err := checkRefValue(field, f, v); err != nil {
			return err
		}
	}
	for _, f := range variant.fields {
		if _, ok := ext[f.name]; f.req && !ok {
			return artifactErr("external_ref."+f.name, "is required")
		}
	}
	return nil
}

// checkRefValue checks the non-null value v of an external_ref field.
func checkRefValue(field string, f refField, v any) *ArtifactError {
	switch f.kind {
	case "string", "host", "public_url":
		s, isStr := v.(string)
		if !isStr {
			return artifactErr(field, "must be a string")
		}
		if f.req && strings.TrimSpace(s) == "" {
			return artifactErr(field, "is required")
		}
		if f.kind == "host" && !validHost(s) {
			return artifactErr(field, "%q is not a hostname", s)
		}
		if f.kind == "public_url" {
			if msg := publicURL(s, false); msg != "" {
				return artifactErr(field, "%s", msg)
			}
		}
	case "integer":
		num, isNum := v.(json.Number)
		if !isNum {
			return artifactErr(field, "must be an integer")
		}
		if _, err := num.Int64(); err != nil {
			return artifactErr(field, "must be an integer")
		}
	case "hint":
		return checkDisplayHint(field, v)
	}
	return nil
}

// checkDisplayHint checks an external_ref's display_hint object.
func checkDisplayHint(field string, v any) *ArtifactError {
	hint, isMap := v.(map[string]any)
	if !isMap {
		return artifactErr(field, "must be an object")
	}
	for _, hk := range sortedKeys(hint) {
		hf := field + "." + hk
		switch hk {
		case "title", "icon_url", "provider_name":
		default:
			return artifactErr(hf, "unknown key")
		}
		if hint[hk] == nil {
			continue
		}
		s, isStr := hint[hk].(string)
		if !isStr {
			return artifactErr(hf, "must be a string")
		}
		if hk == "icon_url" {
			if msg := publicURL(s, true); msg != "" {
				return artifactErr(hf, "%s", msg)
			}
		}
	}
	return nil
}

// normalizeNumbers turns json.Number into float64 (or int64 past 2^53).
func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil && (i > 1<<53 || i < -(1<<53)) {
			return i
		}
		f, _ := x.Float64()
		if math.IsInf(f, 0) {
			return x.String()
		}
		return f
	}
	return v
}

func validHost(s string) bool {
	if s == "" || len(s) > 253 || strings.ContainsAny(s, "/:@ ") {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
	}
	return true
}

// publicURL reports why raw is not a public http(s) URL (https only when
// httpsOnly), or "".
func publicURL(raw string, httpsOnly bool) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" {
		return fmt.Sprintf("%q is not an absolute URL", raw)
	}
	switch {
	case httpsOnly && u.Scheme != "https":
		return fmt.Sprintf("%q must be an https URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q must be an http or https URL", raw)
	case u.User != nil:
		return fmt.Sprintf("%q must not carry credentials", raw)
	}
	host := strings.ToLower(u.Hostname())
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || strings.HasSuffix(host, ".local") || strings.HasSuffix(host, ".internal") {
		return fmt.Sprintf("%q is not a public URL", raw)
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast() {
			return fmt.Sprintf("%q is not a public URL", raw)
		}
	} else if !strings.Contains(host, ".") {
		return fmt.Sprintf("%q is not a public URL", raw)
	}
	return ""
}
