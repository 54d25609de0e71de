#!/usr/bin/env bash
# Issue 25, items 6(a) and 6(b): evalgate --speed-only at realistic size on one GPU (the config-only 8B-shaped
# Nemotron-H, random weights, BF16, CUDA graphs, both engines at gpu_memory_utilization 0.8 in placement: alternate).
#
# Run detached from the repo root on the device, after the GPU kit's install (../shared/tools/gpu/INSTALL.sh):
#   setsid nohup bash benchmarks/gpu_scale.sh > /tmp/r/gpu_scale.log 2>&1 &
# and poll /tmp/r/summary.txt (one line per step: name, exit code, verdict, speed-up [95 % interval] per
# concurrency, precision reached, pairs, seconds). Each step's run directory is /tmp/r/<step>/ (verdict.json,
# report.html, logs/); a step that fails is recorded and the next one runs.
#
# Steps (STEPS overrides the list, e.g. STEPS="aa fp16-state"):
#   aa               scale/aa --precision 0.03 at 512/512, concurrency 256 (Stein's two-stage rule, a first stage
#                    of AA_REPEATS pairs; at most MAX_REPEATS pairs or MAX_SECONDS of speed phase): the A/A
#                    half-width and whether it covers 1
#   fp16-state       scale/fp16-state vs scale/baseline, concurrency 16 and 256, REPEATS pairs
#   flashinfer-mamba scale/flashinfer-mamba vs scale/baseline, concurrency 16 and 256, REPEATS pairs
#   LEVELS_RUN (e.g. 1,16,256) sets the concurrency of these run steps and of fp16-state-sr, async-sched and omp1
#   (default: LOW,HIGH, i.e. 16,256; 2,4 on CPU)
#   aa-coverage      AA_RUNS (default 3) A/A runs of scale/aa at concurrency 256, REPEATS pairs each, each with its
#                    own two engine starts; then "k of N runs' intervals cover 1" (issue 25 6a's coverage over runs;
#                    fixed repeats: each run is two starts plus REPEATS pairs, ~5-6 min on an H100 with warm caches)
#   (also possible: fp16-state-sr, async-sched, omp1, moe-fp16-state: the 30B-A3B shape at c=16/256 (on a GPU under
#   100 GiB its 80 GB configs scale/moe/*-80g at c=16/64; MOE_CONFIG, LEVELS_MOE override), and
#   ablate: scale/recipe's switches alone at c=256 (LEVELS_ABLATE, e.g. 1,16,256; SWITCHES, e.g.
#   mamba_backend,async_scheduling: only those rows), one baseline engine asleep between variants; on an H100 one
#   switch at 1,16,256 with 3 repeats took 626-859 s, its first start cold; at 256 with 2 repeats 347 s, all warm)
# Expected time on an H200 (vLLM 0.26.0; engine start with CUDA graphs 90-160 s, first sleep 10-16 s, a
# 512/512 pass at c=256 ~16 s, at c=16 ~6-8 s, sleep + wake ~1 s per switch):
#   aa ~12-13 min (2 starts ~5 min; speed phase capped at MAX_SECONDS=480 s, pairs ~35 s each), fp16-state
#   ~7 min, flashinfer-mamba ~7 min: ~27 min for the default list; STEPS="aa fp16-state" ~20 min, STEPS=aa ~13 min.
# Measured on one H100 80GB (2026-12-06, benchmarks/results/h100-vllm-0.26.0/session17/): starts 236 s cold and
# 128 s, a c=256 pass 27-30 s, a pair ~56 s with its sleep/wake, so the A/A's 8 first-stage pairs take ~7.5 min.
# H100s of 2026-12-07 (sessions 25/26): engine starts 202-282 s cold, 51-194 s later; sleeps 0.33-0.38 s after the
# first (8-15 s), wakes 0.56-0.62 s.
# Why the A/A's first stage is 8 pairs, not REPEATS' 3: Stein's rule asks for n = t²(n0-1) s0² / ln(1.03)² pairs
# in all, and t_{0.975,2} = 4.30 is large. At a per-pass CV of 3 % per side (s0 ≈ 4.2 % on the log ratio) that is
# 39 pairs (~23 min) after a first stage of 3, 14 after 6 and 12 after 8 (~7 min); at a CV of 2 %, 17 / 7 / 8.
#
# On CPU (SCALE_CPU=1) the same steps run the CPU-sized family (configs/scale/cpu/: the embedded hybrid's layers
# with the 8B shape's 131,072-token vocabulary, random weights, both engines resident) at a tiny profile, to try the
# script where there is no GPU; a step whose config the CPU family lacks (flashinfer-mamba, fp16-state-sr,
# async-sched, omp1) is skipped there.
set -uo pipefail

STEPS=${STEPS:-aa fp16-state flashinfer-mamba}
REPEATS=${REPEATS:-3}
AA_RUNS=${AA_RUNS:-3}
AA_REPEATS=${AA_REPEATS:-8}
MAX_REPEATS=${MAX_REPEATS:-16}
MAX_SECONDS=${MAX_SECONDS:-480}
# shellcheck source=benchmarks/gpu_scale_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_scale_env.sh"

# summarize STEP RC SECONDS: one line for summary.txt from the step's verdict.json (or why there is none).
summarize() {
  "$PY" - "$R/$1" "$1" "$2" "$3" <<'PYEOF' >> "$R/summary.txt" 2>&1
import json, sys
out, step, rc, secs = sys.argv[1:5]
try:
    doc = json.load(open(f"{out}/verdict.json"))
except (OSError, ValueError) as exc:
    print(f"{step}: rc={rc} {secs} s, no verdict.json ({type(exc).__name__})")
    sys.exit(0)
speed = doc.get("speed") or {}
parts = []
for lv in speed.get("levels", []):
    ratio, lo, hi = lv.get("ratio"), lv.get("ci_low"), lv.get("ci_high")
    text = f"c={lv.get('concurrency')}: x{ratio:.3f} [{lo:.3f}, {hi:.3f}]" if None not in (ratio, lo, hi) else \
        f"c={lv.get('concurrency')}: x{ratio}"
    text += f" base {lv.get('baseline', {}).get('median', float('nan')):,.0f} tok/s" \
        if isinstance(lv.get("baseline"), dict) else ""
    prec = lv.get("precision")
    if prec:
        text += (f", half-width {prec.get('achieved_half_width', float('nan')):.4f} (target {prec.get('target')}), "
                 f"pairs {prec.get('pairs')} (needed {prec.get('pairs_needed')}), stopped {prec.get('stopped')}")
    if None not in (lo, hi):
        text += ", covers 1" if lo <= 1 <= hi else ", excludes 1"
    for role in ("baseline", "candidate"):  # what each side held (throughput.window_streams, vLLM's preemptions)
        side = lv.get(role) or {}
        if side.get("streams") or side.get("preemptions"):
            text += f", {role} streams {side.get('streams')} preempted {side.get('preemptions')}"
    parts.append(text)
if speed.get("status") not in (None, "measured"):
    parts.append(f"speed {speed.get('status')}: {speed.get('error')}")
place = (doc.get("manifest") or {}).get("placement") or {}
moves = f"sleeps {place.get('sleeps', 0)}, wakes {place.get('wakes', 0)}, restarts {place.get('restarts', 0)}"
print(f"{step}: rc={rc} {secs} s, {doc.get('verdict')}, placement {place.get('mode')} ({moves}); " + "; ".join(parts))
PYEOF
}

# step NAME ARGS...: evalgate run ARGS into $R/NAME, its output in $R/NAME.log; never stops the script.
step() {
  local name=$1; shift
  local s; s=$(date +%s)
  rm -rf "${R:?}/$name"
  echo "== $name: evalgate run $* ($(date -u +%T))"
  "$PY" -m evalgate run "$@" --speed-only --thresholds "$THRESHOLDS" --out "$R/$name" > "$R/$name.log" 2>&1
  local rc=$?
  summarize "$name" "$rc" "$(( $(date +%s) - s ))"
  tail -n 1 "$R/summary.txt"
}

# coverage: how many of the aa-run* steps' intervals cover 1, one line for summary.txt (a run without an interval
# counts as not covering; it is named, so the count is never silently over a smaller N).
coverage() {
  "$PY" - "$R" "$AA_RUNS" <<'PYEOF' >> "$R/summary.txt" 2>&1
import json, math, sys
out, n = sys.argv[1], int(sys.argv[2])
covered, missing = 0, []
for i in range(1, n + 1):  # every run asked for, so one that left no directory still counts in N
    try:
        lv = json.load(open(f"{out}/aa-run{i}/verdict.json"))["speed"]["levels"][0]
        lo, hi = float(lv["ci_low"]), float(lv["ci_high"])
        if math.isnan(lo) or math.isnan(hi):
            raise ValueError("NaN bound")
        covered += lo <= 1 <= hi
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        missing.append(f"aa-run{i}")
print(f"aa-coverage: {covered} of {n} runs' intervals cover 1" + (f" (no interval: {', '.join(missing)})" if missing else ""))
PYEOF
  tail -n 1 "$R/summary.txt"
}

# ablate_step: each of scale/recipe's switches alone against scale/baseline (--speed-only, at LEVELS_ABLATE, default
# 256, the baseline's engine kept asleep between variants), into $R/ablate; one summary line per row from
# ablation.json.
ablate_step() {
  local s; s=$(date +%s)
  rm -rf "${R:?}/ablate"
  echo "== ablate: $FAMILY/recipe --kind alone ($(date -u +%T))"
  "$PY" -m evalgate ablate --config "$FAMILY/recipe" --speed-only --kind alone --concurrency "${LEVELS_ABLATE:-$HIGH}" \
    ${SWITCHES:+--switches "$SWITCHES"} --repeats "$REPEATS" --thresholds "$THRESHOLDS" --out "$R/ablate" \
    > "$R/ablate.log" 2>&1
  local rc=$?
  "$PY" - "$R/ablate/ablation.json" "$rc" "$(( $(date +%s) - s ))" <<'PYEOF' >> "$R/summary.txt" 2>&1
import json, sys
path, rc, secs = sys.argv[1:4]
try:
    doc = json.load(open(path))
except (OSError, ValueError) as exc:
    print(f"ablate: rc={rc} {secs} s, no ablation.json ({type(exc).__name__})")
    sys.exit(0)
place = doc.get("meta", {}).get("placement") or {}
print(f"ablate: rc={rc} {secs} s, placement {place.get('mode')} (sleeps {place.get('sleeps', 0)}, wakes "
      f"{place.get('wakes', 0)}, restarts {place.get('restarts', 0)})")
for r in doc.get("rows", []):
    cells = [f"c={lv['concurrency']}: x{lv['ratio']:.3f} [{lv['ci_low']:.3f}, {lv['ci_high']:.3f}]"
             if None not in (lv.get("ratio"), lv.get("ci_low"), lv.get("ci_high")) else f"c={lv.get('concurrency')}: -"
             for lv in r.get("speed") or []]
    print(f"  {r.get('label')}: {r.get('verdict') or r.get('skipped') or r.get('not_run')}; " + "; ".join(cells))
PYEOF
  tail -n 1 "$R/summary.txt"
}

for s in $STEPS; do
  case $s in
    aa) step aa --config "$FAMILY/aa" --concurrency "$HIGH" --precision 0.03 --repeats "$AA_REPEATS" \
          --max-repeats "$MAX_REPEATS" --max-seconds "$MAX_SECONDS" ;;
    fp16-state|async-sched|omp1|flashinfer-mamba|fp16-state-sr)
      # The CPU family holds only what runs there (no FlashInfer) and what its tiny profile can show.
      if [ ! -f "configs/$FAMILY/$s.yaml" ]; then echo "$s: skipped (no configs/$FAMILY/$s.yaml)" >> "$R/summary.txt"; continue; fi
      step "$s" --config "$FAMILY/$s" --concurrency "${LEVELS_RUN:-$LOW,$HIGH}" --repeats "$REPEATS" ;;
    moe-fp16-state)
      # Under 100 GiB of GPU memory (an H100) the 30B-A3B shape runs its 80 GB configs: 0.88 each, <= 64 sequences.
      mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -d ' ')
      if [[ $mib =~ ^[0-9]+$ ]] && [ "$mib" -lt 102400 ]; then moe=scale/moe/fp16-state-80g; else moe=scale/moe/fp16-state; fi
      moe=${MOE_CONFIG:-$moe}
      case $moe in *-80g) moe_levels=16,64 ;; *) moe_levels=$LOW,$HIGH ;; esac  # the 80 GB configs serve <= 64
      step "$s" --config "$moe" --concurrency "${LEVELS_MOE:-$moe_levels}" --repeats "$REPEATS" ;;
    ablate) ablate_step ;;
    aa-coverage)
      rm -rf "${R:?}"/aa-run*  # an earlier invocation's runs into the same $R are not this one's
      for i in $(seq 1 "$AA_RUNS"); do
        step "aa-run$i" --config "$FAMILY/aa" --concurrency "$HIGH" --repeats "$REPEATS"
      done
      coverage ;;
    *) echo "$s: unknown step" >> "$R/summary.txt" ;;
  esac
done
echo "# done $(date -u +%FT%TZ)" >> "$R/summary.txt"
