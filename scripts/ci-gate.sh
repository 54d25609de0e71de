#!/usr/bin/env bash
# Gate configs and leave what CI publishes: the gate step of .github/workflows/evalgate.yml runs this, and
# tests/system/test_workflow.py runs that step locally. `evalgate` must be on PATH.
#   GATE_CONFIGS   space-separated config names; empty: the configs the change needs gated
#                  (`evalgate changed-configs --base "$GATE_BASE"`)
#   GATE_BASE      git ref to diff against when GATE_CONFIGS is empty (default origin/main)
#   GATE_LIMIT     items per task (empty: all)
#   GATE_SUITES    space-separated suite names (empty: all)
#   GATE_REPORTS   output folder (default reports): reports/<config>/ holds report.html, verdict.json,
#                  verdict.junit.xml, summary.md, manifest.json, baseline.json, candidate.json, logs/
#   GITHUB_STEP_SUMMARY  Markdown file the summaries are appended to (set by GitHub Actions)
# Exit 0 when every config PASSes or is NO-OP (exit 4: the engine applied no change); 1 when any config
# BLOCKs, is INCONCLUSIVE or fails (an error is never a pass). reports/exit-codes.tsv lists each config's code.
set -uo pipefail
reports=${GATE_REPORTS:-reports}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
mkdir -p "$reports"
: > "$reports/exit-codes.tsv"

configs=${GATE_CONFIGS:-}
if [ -z "$configs" ]; then
  if ! configs=$(evalgate changed-configs --base "${GATE_BASE:-origin/main}"); then
    printf '## evalgate ERROR\n\nCould not list the changed configs against `%s`.\n' "${GATE_BASE:-origin/main}" >> "$summary"
    exit 1
  fi
fi
if [ -z "${configs//[[:space:]]/}" ]; then
  printf '## evalgate: no configs to gate\n\nThe change adds or modifies no gateable config.\n' >> "$summary"
  echo "evalgate: no configs to gate"
  exit 0
fi

args=()
if [ -n "${GATE_LIMIT:-}" ]; then args+=(--limit "$GATE_LIMIT"); fi
if [ -n "${GATE_SUITES:-}" ]; then
  read -r -a suites <<< "$GATE_SUITES"
  args+=(--suites "${suites[@]}")
fi

status=0
for cfg in $configs; do
  out="$reports/${cfg//\//_}"
  echo "::group::evalgate run --config $cfg"
  evalgate run --config "$cfg" "${args[@]}" --out "$out"
  rc=$?
  echo "::endgroup::"
  printf '%s\t%s\n' "$cfg" "$rc" >> "$reports/exit-codes.tsv"
  if [ -f "$out/summary.md" ]; then
    cat "$out/summary.md" >> "$summary"
  else
    printf '## evalgate ERROR: %s (exit %s)\n\nNo summary was written; see the job log.\n' "$cfg" "$rc" >> "$summary"
  fi
  printf '\n' >> "$summary"
  case $rc in
    0) echo "evalgate: $cfg: PASS" ;;
    4) echo "evalgate: $cfg: NO-OP (the engine applied the same configuration to both sides)" ;;
    *) echo "::error title=evalgate $cfg::exit $rc (1 BLOCK, 2 usage/config error, 3 runtime error, 5 INCONCLUSIVE)"
       status=1 ;;
  esac
done
exit $status
