package manifests

import (
	"strings"
	"testing"
)

func TestParseArtifactsValid(t *testing.T) {
	exists := func(slug string) bool { return slug == "guide" }
	lines := []string{
		`{"type":"pull_request","provider":"code_host","external_ref":{"provider":"code_host","kind":"pull_request","owner":"o","repo":"r","number":42,"id":"1","node_id":"n"},"operation":"created","url":"https://code.example.com/o/r/pull/42","title":"Fix","status":"open","metadata":{"draft":false}}`,
		`{"type":"knowledge_item","provider":"svc","external_ref":{"provider":"svc","slug":"guide"}}`,
		`{"type":"issue","provider":"issue_tracker_b","external_ref":{"provider":"issue_tracker_b","key":"PRJ-1","project":"PRJ","site":"tracker.example.com","id":null}}`,
		`{"type":"issue","provider":"issue_tracker_a","external_ref":{"provider":"issue_tracker_a","identifier":"ENG-7","team":"eng","issue_id":"x","id":"y","kind":"issue"}}`,
		`{"type":"message","provider":"chat_tool","external_ref":{"provider":"chat_tool","channel":"C1","ts":"1700000000.1"}}`,
		`{"type":"url","provider":"url","external_ref":{"provider":"url","url":"http://docs.example.org/x","display_hint":{"title":"Docs","icon_url":"https://docs.example.org/i.png","provider_name":"Docs"}}}`,
		``,
	}
	refs, err := ParseArtifacts([]byte(strings.Join(lines, "\n")), exists)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 6 {
		t.Fatalf("%d refs, want 6", len(refs))
	}
	wantKinds := []string{"pull_request", "knowledge_item", "issue", "issue", "message", "url"}
	for i, r := range refs {
		if got := r["external_ref"].(map[string]any)["kind"]; got != wantKinds[i] {
			t.Errorf("ref %d kind %v, want %s", i, got, wantKinds[i])
		}
	}
	if n := refs[0]["external_ref"].(map[string]any)["number"]; n != 42.0 {
		t.Errorf("number %v (%T), want 42", n, n)
	}
}

func TestParseArtifactsInvalid(t *testing.T) {
	exists := func(slug string) bool { return slug == "guide" }
	cases := []struct{ name, line, want string }{
		{"not json", `nope`, "line 2: not a JSON object"},
		{"unknown key", `{"type":"x","provider":"svc","external_ref":{"provider":"svc","slug":"guide"},"extra":1}`, "line 2: extra: unknown key"},
		{"no type", `{"provider":"svc","external_ref":{"provider":"svc","slug":"guide"}}`, "line 2: type: is required"},
		{"no external_ref", `{"type":"x","provider":"svc"}`, "line 2: external_ref: is required"},
		{"provider mismatch", `{"type":"x","provider":"url","external_ref":{"provider":"svc","slug":"guide"}}`, `line 2: provider: "url" must equal external_ref.provider "svc"`},
		{"unknown provider", `{"type":"x","provider":"ftp","external_ref":{"provider":"ftp"}}`, "line 2: external_ref.provider: must be one of"},
		{"top url private", `{"type":"x","provider":"svc","url":"http://127.0.0.1/x","external_ref":{"provider":"svc","slug":"guide"}}`, "line 2: url: \"http://127.0.0.1/x\" is not a public URL"},
		{"metadata type", `{"type":"x","provider":"svc","metadata":[1],"external_ref":{"provider":"svc","slug":"guide"}}`, "line 2: metadata: must be an object"},
		{"code_host kind", `{"type":"pr","provider":"code_host","external_ref":{"provider":"code_host","number":1}}`, "line 2: external_ref.kind: is required"},
		{"code_host number", `{"type":"pr","provider":"code_host","external_ref":{"provider":"code_host","kind":"pr","number":1.5}}`, "line 2: external_ref.number: must be an integer"},
		{"code_host unknown", `{"type":"pr","provider":"code_host","external_ref":{"provider":"code_host","kind":"pr","branch":"b"}}`, "line 2: external_ref.branch: unknown key for provider code_host"},
		{"svc missing slug", `{"type":"k","provider":"svc","external_ref":{"provider":"svc"}}`, "line 2: external_ref.slug: is required"},
		{"svc unknown slug", `{"type":"k","provider":"svc","external_ref":{"provider":"svc","slug":"nope"}}`, `line 2: external_ref.slug: knowledge item "nope" does not exist`},
		{"svc kind", `{"type":"k","provider":"svc","external_ref":{"provider":"svc","slug":"guide","kind":"file"}}`, `line 2: external_ref.kind: must be "knowledge_item"`},
		{"tracker_b site", `{"type":"i","provider":"issue_tracker_b","external_ref":{"provider":"issue_tracker_b","site":"https://x.example.com"}}`, "line 2: external_ref.site: \"https://x.example.com\" is not a hostname"},
		{"tracker_a type", `{"type":"i","provider":"issue_tracker_a","external_ref":{"provider":"issue_tracker_a","team":7}}`, "line 2: external_ref.team: must be a string"},
		{"chat missing ts", `{"type":"m","provider":"chat_tool","external_ref":{"provider":"chat_tool","channel":"C"}}`, "line 2: external_ref.ts: is required"},
		{"url missing", `{"type":"u","provider":"url","external_ref":{"provider":"url"}}`, "line 2: external_ref.url: is required"},
		{"url not http", `{"type":"u","provider":"url","external_ref":{"provider":"url","url":"ftp://x.example.com/f"}}`, "line 2: external_ref.url: \"ftp://x.example.com/f\" must be an http or https URL"},
		{"url localhost", `{"type":"u","provider":"url","external_ref":{"provider":"url","url":"http://localhost:8080/"}}`, "is not a public URL"},
		{"url private ip", `{"type":"u","provider":"url","external_ref":{"provider":"url","url":"https://10.1.2.3/"}}`, "is not a public URL"},
		{"icon http", `{"type":"u","provider":"url","external_ref":{"provider":"url","url":"https://x.example.com/","display_hint":{"icon_url":"http://x.example.com/i.png"}}}`, "line 2: external_ref.display_hint.icon_url: \"http://x.example.com/i.png\" must be an https URL"},
		{"hint unknown", `{"type":"u","provider":"url","external_ref":{"provider":"url","url":"https://x.example.com/","display_hint":{"color":"red"}}}`, "line 2: external_ref.display_hint.color: unknown key"},
		{"display_hint elsewhere", `{"type":"m","provider":"chat_tool","external_ref":{"provider":"chat_tool","channel":"C","ts":"1","display_hint":{}}}`, "line 2: external_ref.display_hint: unknown key for provider chat_tool"},
	}
	good := `{"type":"knowledge_item","provider":"svc","external_ref":{"provider":"svc","slug":"guide"}}`
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			_, err := ParseArtifacts([]byte(good+"\n"+tc.line+"\n"), exists)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want it to contain %q", err, tc.want)
			}
			if ae, ok := err.(*ArtifactError); !ok || ae.Line != 2 {
				t.Errorf("error %T %+v, want an *ArtifactError on line 2", err, err)
			}
		})
	}
}
