#!/bin/sh
# Harness wrapper for a headless coding-agent CLI with a "print mode": it
# takes the prompt as an argument, runs non-interactively and prints one JSON
# result document ({"session_id", "result", "structured_output", "usage":
# {"input_tokens", "output_tokens"}, ...}). AGENT_A_BIN names the CLI (default
# agent-a); adjust the flags below to the CLI you install. Needs jq.
#
# Configured in factory.toml as:
#   command        = [".../agent-a.sh", "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{effort}}", "--mcp-config={{mcp_config}}", "--output-schema={{output_schema}}"]
#   resume_command = [".../agent-a.sh", "--resume={{session_id}}", ... the same ...]
# An argument whose placeholder is empty is dropped by the service, so every
# flag below is optional.
set -eu
bin=${AGENT_A_BIN:-agent-a}
prompt_file="" model="" effort="" mcp="" schema="" resume=""
for arg in "$@"; do
	case "$arg" in
	--prompt-file=*) prompt_file=${arg#*=} ;;
	--model=*) model=${arg#*=} ;;
	--effort=*) effort=${arg#*=} ;;
	--mcp-config=*) mcp=${arg#*=} ;;
	--output-schema=*) schema=${arg#*=} ;;
	--resume=*) resume=${arg#*=} ;;
	*) echo "agent-a.sh: unknown argument $arg" >&2; exit 2 ;;
	esac
done
prompt=$(cat "${prompt_file:-/dev/null}")
if [ -n "${SVC_KNOWLEDGE_DIR:-}" ]; then
	# The knowledge items are files the agent may read; say where they are.
	prompt="$prompt

Reference material (read what you need): $SVC_KNOWLEDGE_DIR (index.json lists the items)."
fi
set -- -p "$prompt" --output-format json
[ -n "$model" ] && set -- "$@" --model "$model"
[ -n "$effort" ] && export AGENT_A_EFFORT="$effort"
[ -n "$mcp" ] && set -- "$@" --mcp-config "$mcp"
[ -n "$schema" ] && set -- "$@" --json-schema "$(cat "$schema")"
[ -n "$resume" ] && set -- "$@" --resume "$resume"
result=$(mktemp)
trap 'rm -f "$result"' EXIT
"$bin" "$@" >"$result"
# Hand the service what it reads back.
jq -r '.session_id // empty' "$result" >"$SVC_SESSION_FILE"
jq -c --arg m "$model" '{model: (.model // $m), input_tokens: (.usage.input_tokens // 0), output_tokens: (.usage.output_tokens // 0)}' "$result" >>"$SVC_USAGE"
if [ -n "$schema" ]; then
	# One JSON object of the claimed outputs.
	jq -c '.structured_output // (.result | fromjson)' "$result" >"$SVC_OUTPUT"
fi
jq -r '.result // empty' "$result" | head -c 65536
if [ "$(jq -r '.is_error // false' "$result")" = "true" ]; then
	exit 1
fi
