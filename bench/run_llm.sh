#!/usr/bin/env bash
# kiln generate vs ExecuTorch 1.5.1's runtime on the same LLM exports: prefill time and decode
# tokens/s, greedy, interleaved (issue 12's measure).
#
# Usage: bench/run_llm.sh [K] [VARIANT ...]
#   K (default 5) interleaved rounds. VARIANTs (default: xnnpack_8da4w sdpa_xnnpack_8da4w fp32)
#   are tools/fixtures/export_llama.py's names.
# Environment:
#   PROMPT (32) prompt tokens, NEW (65) tokens generated (the first from the prefill logits;
#   decode tokens/s counts the other NEW-1, as ExecuTorch's runner does)
#   DIMS ("--dim 128 --layers 2 --heads 4 --kv-heads 2 --hidden 352 --vocab 512 --max-seq-len 128"):
#   the model exported (the shape of ../shared/reference/llm-exports.md's measurements)
#   KILN (target/release/kiln), PY (~/peers/bin/python), CACHE (bench/.models/llm)
#   KILN_THREADS / ET_THREADS: threads of each (default: each one's own default)
#
# Steps: (1) export every variant with tools/fixtures/export_llama.py into CACHE (skipped when
# cached; it records ExecuTorch's greedy tokens too). (2) K rounds; in each, kiln
# (`kiln generate --json`) and ExecuTorch (bench/executorch_llm_peer.py) each run every variant
# once, in alternating order, each run a fresh process loading the program. Every run's
# tokens must equal ExecuTorch's (flagged WRONG otherwise). (3) Per variant: the medians over
# rounds of prefill ms and decode tokens/s, and the ratios (prefill: kiln/ET < 1 is faster;
# decode: kiln/ET > 1 is faster); then load ms and peak memory: kiln's whole process (its peak
# RSS, /usr/bin/time), ExecuTorch's growth past its imports (torch alone holds hundreds of MB).
# Load averages are printed at the start and the end.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
KILN=${KILN:-$ROOT/target/release/kiln}
PY=${PY:-$HOME/peers/bin/python}
CACHE=${CACHE:-$ROOT/bench/.models/llm}
PROMPT=${PROMPT:-32}
NEW=${NEW:-65}
DIMS=${DIMS:---dim 128 --layers 2 --heads 4 --kv-heads 2 --hidden 352 --vocab 512 --max-seq-len 128}
K=${1:-5}
shift || true
if ! [[ $K =~ ^[1-9][0-9]*$ ]]; then
  echo "K must be a positive number of rounds, not '$K' (usage: $0 [K] [VARIANT ...])" >&2
  exit 2
fi
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(xnnpack_8da4w sdpa_xnnpack_8da4w fp32)
[ -x "$KILN" ] || { echo "no kiln at $KILN: cargo build --release -p kiln-cli" >&2; exit 2; }

key=$(echo "$DIMS" | tr -c 'a-z0-9' '_')
dir="$CACHE/$key"
mkdir -p "$dir"
for v in "${VARIANTS[@]}"; do
  if [ ! -f "$dir/$v.expected.json" ]; then
    echo "exporting $v ($DIMS) ..." >&2
    # shellcheck disable=SC2086
    "$PY" "$ROOT/tools/fixtures/export_llama.py" --out "$dir" $DIMS "$v" >/dev/null 2>&1 ||
      { echo "export of $v failed" >&2; exit 1; }
  fi
done

# A seeded prompt inside the vocabulary.
vocab=$(jq '.params.vocab_size' "$dir/${VARIANTS[0]}.expected.json")
prompt=$(awk -v n="$PROMPT" -v v="$vocab" 'BEGIN {srand(12); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), int(rand() * v)}')

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
kiln_threads=()
[ -n "${KILN_THREADS:-}" ] && kiln_threads=(--threads "$KILN_THREADS")
et_threads=()
[ -n "${ET_THREADS:-}" ] && et_threads=(--threads "$ET_THREADS")
declare -A prefill decode tokens_of margins_of load rss
rss_file=$(mktemp)
trap 'rm -f "$rss_file"' EXIT
run_kiln() {
  local json
  json=$(/usr/bin/time -f '%M' -o "$rss_file" \
    "$KILN" generate "$dir/$1.pte" --prompt-tokens "$prompt" --max-new-tokens "$NEW" --json "${kiln_threads[@]}")
  jq -c --argjson kb "$(tail -1 "$rss_file")" '. + {peak_mb: ($kb / 1024)}' <<<"$json"
}
run_et() {
  "$PY" "$ROOT/bench/executorch_llm_peer.py" "$dir/$1.pte" --prompt-tokens "$prompt" --new-tokens "$NEW" "${et_threads[@]}" 2>/dev/null |
    tail -1 | jq -c '. + {peak_mb: .rss_growth_mb}'
}
for ((r = 0; r < K; r++)); do
  for v in "${VARIANTS[@]}"; do
    if ((r % 2)); then order=(et kiln); else order=(kiln et); fi
    for who in "${order[@]}"; do
      out=$("run_$who" "$v")
      prefill[$who.$v]+="$(jq '.prefill_ms' <<<"$out")"$'\n'
      decode[$who.$v]+="$(jq '.decode_tokens_per_s' <<<"$out")"$'\n'
      load[$who.$v]+="$(jq '.load_ms' <<<"$out")"$'\n'
      rss[$who.$v]+="$(jq '.peak_mb' <<<"$out")"$'\n'
      tokens_of[$who.$v]=$(jq -c '.tokens' <<<"$out")
      [ "$who" = et ] && margins_of[$v]=$(jq -c '.margins' <<<"$out")
    done
  done
  echo "round $((r + 1))/$K done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

printf '%-20s %12s %12s %8s %14s %14s %8s  %s\n' variant "kiln pre ms" "ET pre ms" ratio "kiln dec t/s" "ET dec t/s" ratio tokens
for v in "${VARIANTS[@]}"; do
  kp=$(printf '%s' "${prefill[kiln.$v]}" | median)
  ep=$(printf '%s' "${prefill[et.$v]}" | median)
  kd=$(printf '%s' "${decode[kiln.$v]}" | median)
  ed=$(printf '%s' "${decode[et.$v]}" | median)
  # Tokens are compared up to the first step whose top-two margin in ExecuTorch is below 0.01
  # (random-weight models tie there and either answer is right).
  same=$(jq -rn --argjson k "${tokens_of[kiln.$v]}" --argjson e "${tokens_of[et.$v]}" \
    --argjson m "${margins_of[$v]}" '
      ([$m | to_entries[] | select(.value < 0.01) | .key] | .[0]) // ($e | length) | . as $n
      | if $k[:$n] == $e[:$n] then "equal (\($n) of \($e | length) compared)"
        else "WRONG (first \($n) differ)" end')
  printf '%-20s %12.2f %12.2f %8s %14.0f %14.0f %8s  %s\n' "$v" "$kp" "$ep" "$(ratio "$kp" "$ep")" "$kd" "$ed" "$(ratio "$kd" "$ed")" "$same"
done
echo
printf '%-20s %12s %12s %14s %14s\n' variant "kiln load ms" "ET load ms" "kiln peak MB" "ET growth MB"
for v in "${VARIANTS[@]}"; do
  printf '%-20s %12.0f %12.0f %14.0f %14.0f\n' "$v" \
    "$(printf '%s' "${load[kiln.$v]}" | median)" "$(printf '%s' "${load[et.$v]}" | median)" \
    "$(printf '%s' "${rss[kiln.$v]}" | median)" "$(printf '%s' "${rss[et.$v]}" | median)"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
