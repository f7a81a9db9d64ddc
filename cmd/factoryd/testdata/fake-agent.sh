#!/bin/sh
# A fake headless agent CLI for the end-to-end tests of run_agent session
# steps. It checks what the service prepared (AGENTS.md), then answers:
#   - the prompt comes from --prompt-file, which must be $SVC_PROMPT_FILE;
#   - the knowledge bodies are read from $SVC_KNOWLEDGE_DIR (index.json too);
#   - the MCP server urls are read from --mcp ($SVC_MCP_CONFIG);
#   - it writes one JSON object to $SVC_OUTPUT with every key the output
#     schema ($SVC_OUTPUT_SCHEMA) lists, its session id to $SVC_SESSION_FILE
#     (the resumed one when --resume=ID), one usage line to $SVC_USAGE and one
#     artifact to $SVC_ARTIFACTS.
# A prompt holding SLEEP sleeps (the stop test); one holding FAIL exits 7.
set -eu
prompt_file="" resume="" mcp=""
for arg in "$@"; do
	case "$arg" in
	--prompt-file=*) prompt_file=${arg#*=} ;;
	--resume=*) resume=${arg#*=} ;;
	--mcp=*) mcp=${arg#*=} ;;
	--effort= | --model= | --resume= | --mcp=) echo "empty placeholder argument $arg was not dropped" >&2; exit 4 ;;
	esac
done
[ "$prompt_file" = "${SVC_PROMPT_FILE:-}" ] || { echo "--prompt-file=$prompt_file is not SVC_PROMPT_FILE" >&2; exit 3; }
[ "$resume" = "${SVC_SESSION_ID:-}" ] || { echo "--resume=$resume is not SVC_SESSION_ID" >&2; exit 3; }
prompt=$(cat "$prompt_file")
case "$prompt" in
*SLEEP*) sleep 3127 ;;
*FAIL*) echo "failing as asked" >&2; exit 7 ;;
esac
knowledge=""
if [ -n "${SVC_KNOWLEDGE_DIR:-}" ]; then
	grep -q '"content_hash"' "$SVC_KNOWLEDGE_DIR/index.json"
	knowledge=$(cat "$SVC_KNOWLEDGE_DIR"/*.md "$SVC_KNOWLEDGE_DIR"/*.txt 2>/dev/null | tr -d '\n"\\')
fi
mcp_urls=""
if [ -n "$mcp" ]; then
	mcp_urls=$(sed -n 's/.*"url": "\([^"]*\)".*/\1/p' "$mcp" | tr '\n' ' ')
fi
session=${resume:-"sess-$SVC_JOB_RUN_ID-$SVC_STEP"}
value="prompt=$(printf %s "$prompt" | tr -d '\n"\\');knowledge=$knowledge;mcp=$mcp_urls;resume=$resume;model=$SVC_MODEL;harness=$SVC_HARNESS"
keys=$(sed -n 's/^    "\([A-Za-z0-9_]*\)": {$/\1/p' "$SVC_OUTPUT_SCHEMA")
out="{" sep=""
for k in $keys; do
	out="$out$sep\"$k\": \"$value\"" sep=", "
done
printf '%s}\n' "$out" > "$SVC_OUTPUT"
printf '%s\n' "$session" > "$SVC_SESSION_FILE"
printf '{"model": "%s", "input_tokens": 1000000, "output_tokens": 100000}\n' "$SVC_MODEL" >> "$SVC_USAGE"
printf '{"type": "url", "provider": "url", "operation": "created", "external_ref": {"provider": "url", "url": "https://example.com/%s/%s"}}\n' "$SVC_JOB_RUN_ID" "$SVC_STEP" >> "$SVC_ARTIFACTS"
echo "done: $session"
