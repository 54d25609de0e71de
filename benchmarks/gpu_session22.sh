#!/usr/bin/env bash
# Session 22 on the lent GPU (issue 25 item 6c): `placement: alternate` with both engines at gpu_memory_utilization
# 0.8 on the 8B shape survives a real engine death. benchmarks/kill_engine.py (run beside evalgate) SIGKILLs one
# side's engine-core process in the speed phase; evalgate must restart that side (suites from the store, none here:
# --speed-only), repeat the lost pass or switch, record the restart in the placement block, and finish with the
# verdict's exit code (not 3).
#
# Run detached from the repo root on the device, after the GPU kit's install (../shared/tools/gpu/INSTALL.sh):
#   setsid nohup bash benchmarks/gpu_session22.sh > /tmp/r/session.log 2>&1 &
# and poll /tmp/r/summary.txt (one line per step, then one per ablation row); each step's output is /tmp/r/<step>/,
# its log /tmp/r/<step>.log, the injector's JSON line /tmp/r/<step>.kill.json.
#
# Steps (STEPS overrides the list; default "ablate"):
#   ablate  evalgate ablate --config scale/recipe --speed-only --kind alone --switches SWITCHES (default
#           mamba_ssm_cache_dtype,mamba_backend) --concurrency 256 --repeats REPEATS (3); the baseline's engine is
#           killed once, KILL_DELAY (5) s after its KILL_AFTER-th (2nd) KILL_EVENT (wake): inside the first variant's
#           repeat 1/3 on the baseline, so that pass is lost and must be repeated on the restarted engine.
#           Expected on one H100 (session 21: starts 240 s cold / ~160 s warm, a c=256 512/512 pass ~28 s, sleep
#           0.35 s, wake 0.6 s, the first sleep after a start 11-16 s): baseline start 240 s + 2 variants x (start
#           160 s + 8 passes ~225 s + first sleeps ~25 s) + the baseline's restart ~160 s (+ its first sleep) and the
#           repeated pass ~30 s: ~21 min. REPEATS=2 saves ~2 min.
#   run     evalgate run --config scale/fp16-state --speed-only --concurrency 256 --repeats REPEATS, the candidate's
#           engine killed as above (inside its repeat 1/3): 2 starts ~400 s + 8 passes ~225 s + restart ~190 s: ~14 min.
#           STEPS="ablate run" is ~35 min: two device sessions.
#
# On CPU (SCALE_CPU=1) the same steps run the CPU-sized family (configs/scale/cpu/, random weights, both engines
# resident: vLLM's CPU build has no sleep mode, so this tries the together-placement restart) at a tiny profile
# and one switch (mamba_ssm_cache_dtype), to try the script where there is no GPU; with no wakes there, the engine
# is killed right after its KILL_AFTER-th finished pass (found dead at its next pass).
set -uo pipefail

STEPS=${STEPS:-ablate}
REPEATS=${REPEATS:-3}
# shellcheck source=benchmarks/gpu_scale_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_scale_env.sh"
if [ "${SCALE_CPU:-0}" = 1 ]; then
  SWITCHES=${SWITCHES:-mamba_ssm_cache_dtype}
  KILL_EVENT=${KILL_EVENT:-pass}; KILL_DELAY=${KILL_DELAY:-0}
else
  SWITCHES=${SWITCHES:-mamba_ssm_cache_dtype,mamba_backend}
  KILL_EVENT=${KILL_EVENT:-wake}; KILL_DELAY=${KILL_DELAY:-5}
fi
KILL_AFTER=${KILL_AFTER:-2}

# with_kill NAME LOG CMD...: CMD (an evalgate command writing to $R/NAME) with kill_engine.py killing worker LOG's
# engine KILL_DELAY s after its KILL_AFTER-th KILL_EVENT; the command's rc is returned, the injector's line kept in $R/NAME.kill.json.
with_kill() {
  local name=$1 log=$2; shift 2
  rm -rf "${R:?}/$name"
  "$PY" benchmarks/kill_engine.py --out "$R/$name" --log "$log" --after "$KILL_AFTER" --event "$KILL_EVENT" \
    --delay "$KILL_DELAY" \
    --timeout 3000 > "$R/$name.kill.json" 2>&1 &
  local killer=$!
  "$@" > "$R/$name.log" 2>&1
  local rc=$?
  kill "$killer" 2>/dev/null
  wait "$killer" 2>/dev/null
  return $rc
}

# placement_line FILE KEYPATH: the placement block's moves and each side's restarts with their reasons.
placement_line() {
  "$PY" - "$@" <<'PYEOF'
import json, sys
path, where = sys.argv[1:3]
try:
    doc = json.load(open(path))
except (OSError, ValueError) as exc:
    print(f"no {path} ({type(exc).__name__})")
    sys.exit(0)
for key in where.split("."):
    doc = (doc or {}).get(key) or {}
sides = "; ".join(f"{r}: {s.get('restarts', 0)} restarts {s.get('restart_reasons', [])}"
                  for r, s in (doc.get("sides") or {}).items())
print(f"placement {doc.get('mode')} (sleeps {doc.get('sleeps', 0)}, wakes {doc.get('wakes', 0)}, "
      f"restarts {doc.get('restarts', 0)}); {sides}")
PYEOF
}

ablate_step() {
  local s; s=$(date +%s)
  echo "== ablate: $FAMILY/recipe --switches $SWITCHES, baseline killed after $KILL_AFTER $KILL_EVENT ($(date -u +%T))"
  with_kill ablate baseline "$PY" -m evalgate ablate --config "$FAMILY/recipe" --speed-only --kind alone \
    --switches "$SWITCHES" --concurrency "$HIGH" --repeats "$REPEATS" --thresholds "$THRESHOLDS" --out "$R/ablate"
  local rc=$?
  echo "ablate: rc=$rc $(( $(date +%s) - s )) s; kill: $(tail -n 1 "$R/ablate.kill.json"); $(placement_line \
    "$R/ablate/ablation.json" meta.placement)" >> "$R/summary.txt"
  "$PY" - "$R/ablate/ablation.json" <<'PYEOF' >> "$R/summary.txt" 2>&1
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"  no ablation.json ({type(exc).__name__})")
    sys.exit(0)
for r in doc.get("rows", []):
    cells = [f"c={lv['concurrency']}: x{lv['ratio']:.3f} [{lv['ci_low']:.3f}, {lv['ci_high']:.3f}]"
             if None not in (lv.get("ratio"), lv.get("ci_low"), lv.get("ci_high")) else f"c={lv.get('concurrency')}: -"
             for lv in r.get("speed") or []]
    print(f"  {r.get('label')}: {r.get('verdict') or r.get('skipped') or r.get('not_run')}; " + "; ".join(cells))
PYEOF
  tail -n 3 "$R/summary.txt"
}

run_step() {
  local s; s=$(date +%s)
  echo "== run: $FAMILY/fp16-state --speed-only, candidate killed after $KILL_AFTER $KILL_EVENT ($(date -u +%T))"
  with_kill run candidate "$PY" -m evalgate run --config "$FAMILY/fp16-state" --speed-only --concurrency "$HIGH" \
    --repeats "$REPEATS" --thresholds "$THRESHOLDS" --out "$R/run"
  local rc=$?
  local verdict speed
  verdict=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); s=d.get('speed') or {}; print(d.get('verdict'),
s.get('status'), [len(v.get('runs', [])) for v in (s.get('sides') or {}).values()], s.get('error') or '')" \
    "$R/run/verdict.json" 2>&1 | tr '\n' ' ')
  echo "run: rc=$rc $(( $(date +%s) - s )) s, $verdict; kill: $(tail -n 1 "$R/run.kill.json"); $(placement_line \
    "$R/run/manifest.json" placement)" >> "$R/summary.txt"
  tail -n 1 "$R/summary.txt"
}

for s in $STEPS; do
  case $s in
    ablate) ablate_step ;;
    run) run_step ;;
    *) echo "$s: unknown step" >> "$R/summary.txt" ;;
  esac
done
echo "# done $(date -u +%FT%TZ)" >> "$R/summary.txt"
touch "$R/all-done.txt"
