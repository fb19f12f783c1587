#!/usr/bin/env bash
# kiln on the PORTABLE export of a model vs ExecuTorch 1.5.1 on the XNNPACK-lowered export of
# the same model (issue 10's measure), and vs ExecuTorch on the same portable export.
#
# Usage: bench/run_vs_xnnpack.sh [--json] [K] [MODEL ...]
#   K (default 5) interleaved rounds. MODELs (default: all) are bench/export_models.py's names:
#   mobilenet_v2 resnet18_96 resnet18_224 transformer_encoder vit_small lstm gru.
#   --json: stdout gets one JSON object per model and a final {"load_end": ...} line; the
#   human-readable table goes to stderr instead.
# Environment:
#   ITERS (20), WARMUP (3)     timed / untimed executes per run of kiln and ExecuTorch-XNNPACK
#   ET_PORTABLE_ITERS (3), ET_PORTABLE_WARMUP (1)
#                              the same for ExecuTorch on the portable export (seconds per
#                              execute on the CNNs); ET_PORTABLE=0 leaves that contender out
#   ET_THREADS                 ExecuTorch threadpool size (default: ExecuTorch's, one per core)
#   KILN_THREADS               passed as `kiln bench --threads` if the binary has that option;
#                              otherwise kiln runs on 1 thread and this is ignored
#   KILN_PROGRAM (portable)    which export kiln runs: `portable` (issue 10's measure) or
#                              `xnnpack` (kiln runs the XNNPACK-lowered program itself, its
#                              delegates lowered onto kiln's kernels: issue 11's measure)
#   KILN (target/release/kiln), PY (~/peers/bin/python), CACHE (bench/.models), DIFF_TOL (1e-3)
#
# Steps: (1) bench/export_models.py exports every model twice into CACHE (skipped when cached):
# portable.pte and xnnpack.pte from the same seeded weights, one seeded input shared by both,
# and ExecuTorch's outputs of both programs for it. (2) Checks, per model: `kiln inspect` must
# show XnnpackBackend delegates in xnnpack.pte and none in portable.pte, and `kiln run` on
# portable.pte must match ExecuTorch's outputs (max abs diff printed; a diff above DIFF_TOL is
# flagged WRONG, the model is still timed). A model failing to export, delegate or run in kiln
# is reported and skipped. (3) K rounds; each round runs the three contenders once, in an order
# that cycles through all six permutations, so each runs first and last equally often. Every
# run loads its program once, does WARMUP untimed and ITERS timed executes and reports their
# median (`kiln bench --json`, bench/executorch_peer.py --json). The table shows per model the
# median of the K per-run medians of each contender and the ratios kiln / ExecuTorch (< 1:
# kiln is faster). Load averages are printed at the start and the end: record results in
# bench/RESULTS.md only from runs on an otherwise idle machine, with those load averages.
#
# Needs a release kiln (cargo build --release -p kiln-cli) and the ~/peers venv (executorch
# 1.5.1, torch, torchvision), plus jq.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
KILN=${KILN:-$ROOT/target/release/kiln}
KILN_PROGRAM=${KILN_PROGRAM:-portable}
case $KILN_PROGRAM in portable | xnnpack) ;; *)
  echo "KILN_PROGRAM must be portable or xnnpack, not $KILN_PROGRAM" >&2
  exit 2
  ;;
esac
PY=${PY:-$HOME/peers/bin/python}
CACHE=${CACHE:-$ROOT/bench/.models}
JSON=0
if [ "${1:-}" = --json ]; then
  JSON=1
  shift
fi
K=${1:-5}
shift || true
if ! [[ $K =~ ^[1-9][0-9]*$ ]]; then
  echo "K must be a positive number of rounds, not '$K' (usage: $0 [--json] [K] [MODEL ...])" >&2
  exit 2
fi
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  MODELS=(mobilenet_v2 resnet18_96 resnet18_224 transformer_encoder vit_small lstm gru)
fi
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-3}
ET_PORTABLE=${ET_PORTABLE:-1}
ET_PORTABLE_ITERS=${ET_PORTABLE_ITERS:-3}
ET_PORTABLE_WARMUP=${ET_PORTABLE_WARMUP:-1}
DIFF_TOL=${DIFF_TOL:-1e-3}

# Human-readable output: stdout, or stderr in --json mode.
say() { if [ "$JSON" = 1 ]; then printf "$@" >&2; else printf "$@"; fi; }
load() { uptime | sed 's/.*load average: //'; }

[ -x "$KILN" ] || { echo "$KILN not found (cargo build --release -p kiln-cli)" >&2; exit 1; }
et_threads_args=()
if [ -n "${ET_THREADS:-}" ]; then
  et_threads_args=(--threads "$ET_THREADS")
fi
kiln_threads_args=()
if grep -q -- '--threads' <<<"$("$KILN" bench --help)"; then
  kiln_threads=${KILN_THREADS:-default}
  if [ -n "${KILN_THREADS:-}" ]; then
    kiln_threads_args=(--threads "$KILN_THREADS")
  fi
else
  kiln_threads=1
  if [ -n "${KILN_THREADS:-}" ]; then
    echo "note: $KILN bench has no --threads option; KILN_THREADS ignored, kiln runs on 1 thread" >&2
  fi
fi

load_start=$(load)
say 'load average at start: %s\n' "$load_start"
say 'kiln: %s (threads: %s); ExecuTorch threads: %s\n' "$KILN" "$kiln_threads" "${ET_THREADS:-default}"
say 'K=%s rounds; ITERS=%s WARMUP=%s; ExecuTorch portable: ' "$K" "$ITERS" "$WARMUP"
if [ "$ET_PORTABLE" = 1 ]; then
  say 'ITERS=%s WARMUP=%s\n' "$ET_PORTABLE_ITERS" "$ET_PORTABLE_WARMUP"
else
  say 'left out (ET_PORTABLE=0)\n'
fi

# (1) export (cached); a model that failed has no manifest and is skipped below.
# Its per-model lines ("name: cached", "name: exported in S s", "name: FAILED why") go to
# stderr, without torch's and ExecuTorch's log noise.
if ! "$PY" "$ROOT/bench/export_models.py" --out "$CACHE" "${MODELS[@]}" 2>&1 |
  grep -E '^[A-Za-z0-9_]+: |^failed: | error: ' | sed 's/^/  export /' >&2; then
  echo "note: some exports failed (bench/export_models.py ${MODELS[*]} shows why)" >&2
fi

KILN_OUT=$(mktemp -d)
trap 'rm -rf "$KILN_OUT"' EXIT

say '%-20s %10s %10s %10s %9s %9s %9s %9s %9s %s\n' model "kiln ms" "ET-xnn ms" "ET-port ms" \
  "kiln/xnn" "kiln/port" "diff-port" "diff-xnn" "ET-thr" "check"
for m in "${MODELS[@]}"; do
  d=$CACHE/$m
  if [ ! -f "$d/manifest.json" ]; then
    say '%-20s skipped: not exported\n' "$m"
    continue
  fi
  inputs=()
  while IFS= read -r f; do inputs+=(--input "$d/$f"); done < <(jq -r '.inputs[]' "$d/manifest.json")

  # (2) checks: delegation, then kiln's output against ExecuTorch's.
  xnn_info=$("$KILN" inspect --json "$d/xnnpack.pte")
  xnn_delegates=$(jq '[.methods[].delegates[] | select(. == "XnnpackBackend")] | length' <<<"$xnn_info")
  echo "  $m: xnnpack.pte has $xnn_delegates XnnpackBackend delegates and" \
    "$(jq '[.methods[].operators[]] | length' <<<"$xnn_info") operators outside them" >&2
  port_delegates=$("$KILN" inspect --json "$d/portable.pte" | jq '[.methods[].delegates[]] | length')
  if [ "$xnn_delegates" -eq 0 ] || [ "$port_delegates" -ne 0 ]; then
    say '%-20s skipped: xnnpack.pte has %s XnnpackBackend delegates, portable.pte %s delegates\n' \
      "$m" "$xnn_delegates" "$port_delegates"
    continue
  fi
  out=$KILN_OUT/$m
  mkdir -p "$out"
  if ! err=$("$KILN" run "$d/$KILN_PROGRAM.pte" "${inputs[@]}" --out-dir "$out" 2>&1 >/dev/null); then
    say '%-20s skipped: kiln run failed: %s\n' "$m" "$(printf '%s' "$err" | head -3 | tr '\n' ' ')"
    continue
  fi
  diffs=$("$PY" "$ROOT/bench/compare_outputs.py" "$d" "$out" 2>/dev/null) || diffs="inf inf"
  read -r diff_port diff_xnn <<<"$diffs"
  check=$(awk -v a="$diff_port" -v b="$diff_xnn" -v t="$DIFF_TOL" \
    'BEGIN {ok = a != "inf" && b != "inf" && a + 0 <= t + 0 && b + 0 <= t + 0; print ok ? "ok" : "WRONG"}')

  # (3) interleaved timing.
  kiln_runs=()
  xnn_runs=()
  port_runs=()
  et_thr=
  run_kiln() {
    kiln_runs+=("$("$KILN" bench "$d/$KILN_PROGRAM.pte" "${inputs[@]}" "${kiln_threads_args[@]}" \
      --iters "$ITERS" --warmup "$WARMUP" --json | jq .median_ms)")
  }
  run_et() { # PTE ITERS WARMUP -> one JSON line
    "$PY" "$ROOT/bench/executorch_peer.py" "$1" "${inputs[@]}" "${et_threads_args[@]}" \
      --iters "$2" --warmup "$3" --json 2>/dev/null | tail -1
  }
  run_xnn() {
    local j
    j=$(run_et "$d/xnnpack.pte" "$ITERS" "$WARMUP")
    xnn_runs+=("$(jq .median_ms <<<"$j")")
    et_thr=$(jq .threads <<<"$j")
  }
  run_port() {
    if [ "$ET_PORTABLE" = 1 ]; then
      port_runs+=("$(run_et "$d/portable.pte" "$ET_PORTABLE_ITERS" "$ET_PORTABLE_WARMUP" | jq .median_ms)")
    fi
  }
  orders=("kiln xnn port" "xnn port kiln" "port kiln xnn" "kiln port xnn" "port xnn kiln" "xnn kiln port")
  for r in $(seq 1 "$K"); do
    for c in ${orders[$(((r - 1) % 6))]}; do "run_$c"; done
  done
  km=$(printf '%s\n' "${kiln_runs[@]}" | median)
  xm=$(printf '%s\n' "${xnn_runs[@]}" | median)
  pm=$( ((${#port_runs[@]})) && printf '%s\n' "${port_runs[@]}" | median || true)
  echo "  $m runs (ms): kiln ${kiln_runs[*]}; ET-xnnpack ${xnn_runs[*]}; ET-portable ${port_runs[*]:--}" >&2
  pm_col=-
  if [ -n "$pm" ]; then
    pm_col=$(printf '%.3f' "$pm")
  fi
  say '%-20s %10.3f %10.3f %10s %9s %9s %9s %9s %9s %s\n' "$m" "$km" "$xm" "$pm_col" \
    "$(ratio "$km" "$xm")" "$(ratio "$km" "$pm")" "$diff_port" "$diff_xnn" "$et_thr" "$check"
  if [ "$JSON" = 1 ]; then
    jq -cn --arg model "$m" --arg kiln "$km" --arg xnn "$xm" --arg port "${pm:-}" \
      --arg dp "$diff_port" --arg dx "$diff_xnn" --arg check "$check" --arg kt "$kiln_threads" \
      --arg et "$et_thr" --argjson k "$K" --argjson delegates "$xnn_delegates" \
      --arg load "$load_start" \
      '{model: $model, rounds: $k, kiln_ms: ($kiln | tonumber), et_xnnpack_ms: ($xnn | tonumber),
        et_portable_ms: (if $port == "" then null else ($port | tonumber) end),
        kiln_over_et_xnnpack: (($kiln | tonumber) / ($xnn | tonumber)),
        kiln_over_et_portable: (if $port == "" then null
                                else ($kiln | tonumber) / ($port | tonumber) end),
        max_abs_diff_vs_et_portable: (if $dp == "inf" then $dp else ($dp | tonumber) end),
        max_abs_diff_vs_et_xnnpack: (if $dx == "inf" then $dx else ($dx | tonumber) end),
        check: $check, xnnpack_delegates: $delegates, kiln_threads: ($kt | tonumber? // $kt),
        et_threads: ($et | tonumber), load_start: $load}'
  fi
done
load_end=$(load)
say 'load average at end: %s\n' "$load_end"
if [ "$JSON" = 1 ]; then
  jq -cn --arg s "$load_start" --arg e "$load_end" '{load_start: $s, load_end: $e}'
fi
