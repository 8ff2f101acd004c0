#!/usr/bin/env bash
# Batched decode against llama.cpp: N sequences decoding together at a
# C-token context, agentkv `bench-forward --decode-batch N` against
# `llama-batched-bench` (its S_TG), interleaved round by round, same file and
# threads; llama.cpp's figure is the better of -fa off and -fa on. Needs
# scripts/setup_bench.sh (llama-batched-bench).
#   scripts/bench_batched_decode.sh [rounds=3] [N=16] [C=512] [tokens=128] [threads=2] [model] [act-quant=f32]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3} N=${2:-16} C=${3:-512} T=${4:-128} TH=${5:-2}
M=${6:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
AQ=${7:-f32}
B=${AGENTKV_LLAMA_DIR:-$HOME/.cache/agentkv/llama.cpp}/build/bin
[ -x "$B/llama-batched-bench" ] || { echo "no $B/llama-batched-bench: run scripts/setup_bench.sh" >&2; exit 1; }
echo "$N sequences x $T tokens at context $C, $TH threads, $(basename "$M"), f16 KV, agentkv --act-quant $AQ; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| round | agentkv tok/s | llama-batched-bench S_TG tok/s (best -fa) | ratio |"
echo "|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  a=$(build/agentkv bench-forward -m "$M" -r 1 --prompt-lens 16 --decode-ctx "$C" --decode-tokens "$T" \
        --decode-batch "$N" --thread-counts "$TH" --act-quant "$AQ" 2>/dev/null | awk -F'|' '/decode @/ {gsub(/ /, "", $4); print $4}')
  # llama.cpp gets the better of flash attention off and on, each round.
  l=0 lfa=
  for fa in off on; do
    v=$("$B/llama-batched-bench" -m "$M" -c $(((C + T) * N)) -b 2048 -ub 512 -npp "$C" -ntg "$T" -npl "$N" \
          -t "$TH" -tb "$TH" -fa "$fa" 2>&1 | awk -F'|' -v c="$C" '$2 + 0 == c {gsub(/ /, "", $9); print $9}')
    [ -n "$v" ] || { echo "llama-batched-bench -fa $fa printed no S_TG row" >&2; exit 1; }
    if awk -v v="$v" -v l="$l" 'BEGIN {exit !(v > l)}'; then l=$v lfa=$fa; fi
  done
  echo "| $r | $a | $l (-fa $lfa) | $(awk -v a="$a" -v l="$l" 'BEGIN {printf "%.2fx", a / l}') |"
done
