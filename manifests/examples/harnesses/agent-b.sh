#!/bin/sh
# Harness wrapper for a headless coding-agent CLI with an "exec" subcommand:
# it runs one task non-interactively, prints JSON-lines events (one of them
# carries the session/thread id, turn events carry token usage) and can write
# its final message, shaped by a JSON Schema, to a file. AGENT_B_BIN names
# the CLI (default agent-b); adjust the flags below to the CLI you install.
# Needs jq.
#
# Configured in factory.toml as:
#   command        = [".../agent-b.sh", "--prompt-file={{prompt_file}}", "--model={{model}}", "--effort={{effort}}", "--output-schema={{output_schema}}", "--cd={{workdir}}"]
#   resume_command = [".../agent-b.sh", "--resume={{session_id}}", ... the same ...]
# MCP servers come from $SVC_MCP_CONFIG, turned into the CLI's own config.
set -eu
bin=${AGENT_B_BIN:-agent-b}
prompt_file="" model="" effort="" schema="" cd="" resume=""
for arg in "$@"; do
	case "$arg" in
	--prompt-file=*) prompt_file=${arg#*=} ;;
	--model=*) model=${arg#*=} ;;
	--effort=*) effort=${arg#*=} ;;
	--output-schema=*) schema=${arg#*=} ;;
	--cd=*) cd=${arg#*=} ;;
	--resume=*) resume=${arg#*=} ;;
	*) echo "agent-b.sh: unknown argument $arg" >&2; exit 2 ;;
	esac
done
set -- exec --json --skip-git-repo-check
[ -n "$cd" ] && set -- "$@" --cd "$cd"
[ -n "$model" ] && set -- "$@" --model "$model"
[ -n "$effort" ] && set -- "$@" -c "model_reasoning_effort=$effort"
if [ -n "${SVC_MCP_CONFIG:-}" ]; then
	for key in $(jq -r '.mcpServers | keys[]' "$SVC_MCP_CONFIG"); do
		url=$(jq -r --arg k "$key" '.mcpServers[$k].url' "$SVC_MCP_CONFIG")
		set -- "$@" -c "mcp_servers.$key.url=\"$url\""
	done
fi
last=$(mktemp)
events=$(mktemp)
trap 'rm -f "$last" "$events"' EXIT
if [ -n "$schema" ]; then
	set -- "$@" --output-schema "$schema" --output-last-message "$last"
fi
[ -n "$resume" ] && set -- "$@" resume "$resume"
"$bin" "$@" - <"${prompt_file:-/dev/null}" | tee "$events"
jq -r 'select(.type == "thread.started") | .thread_id' "$events" | tail -n 1 >"$SVC_SESSION_FILE"
[ -s "$SVC_SESSION_FILE" ] || printf '%s\n' "$resume" >"$SVC_SESSION_FILE"
jq -c --arg m "$model" 'select(.type == "turn.completed") | {model: $m, input_tokens: (.usage.input_tokens // 0), output_tokens: (.usage.output_tokens // 0)}' "$events" >>"$SVC_USAGE"
if [ -n "$schema" ]; then
	jq -c . "$last" >"$SVC_OUTPUT"
fi
