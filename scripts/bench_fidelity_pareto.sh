#!/usr/bin/env bash
# The segment-reuse schemes at matched compute (issue 28, items 1 and 5):
# naive, epic, cacheblend and sparsex swept over their main parameter on
# each task, every setting on the same prompts as full recomputation, then
# tools/fidelity_pareto.py: each scheme's Pareto front of KL against the
# share of K/V computed, and paired-bootstrap ratios at matched compute.
#   scripts/bench_fidelity_pareto.sh OUT_DIR [TASKS=passkey,mq-niah,vt] [PROMPTS=30] [DOC_TOKENS=] [GEN=16]
# DOC_TOKENS empty keeps each task's own document length; set it (e.g. 1000
# with 4 documents) for longer contexts. Extra bench-fidelity flags may
# follow in BENCH_FLAGS; SCHEMES replaces the list of settings. The tables
# go to OUT_DIR/pareto.md, plots to
# OUT_DIR/pareto-TASK.png when .venv-bench has matplotlib.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/bench_fidelity_pareto.sh OUT_DIR [TASKS] [PROMPTS] [DOC_TOKENS] [GEN]}
TASKS=${2:-passkey,mq-niah,vt} PROMPTS=${3:-30} DOC_TOKENS=${4:-} GEN=${5:-16}
mkdir -p "$OUT"
if [ -z "${SCHEMES:-}" ]; then
  SCHEMES=naive,epic:4,epic:16,epic:64,epic:256
  for r in 0.05 0.15 0.3 0.5 0.8; do SCHEMES+=",cacheblend:$r,sparsex:$r"; done
fi
shape=()
[ -n "$DOC_TOKENS" ] && shape=(--doc-tokens "$DOC_TOKENS")
echo "bench-fidelity: tasks $TASKS, $PROMPTS prompts, $GEN generated tokens, $(nproc) threads, $(date -u '+%Y-%m-%d %H:%M UTC')" >&2
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
build/agentkv bench-fidelity --task "$TASKS" --prompts "$PROMPTS" --gen "$GEN" --schemes "$SCHEMES" \
  "${shape[@]}" ${BENCH_FLAGS:-} --json-out "$OUT/results.json" | tee "$OUT/bench.txt"
plot=()
PY=.venv/bin/python
if [ -x .venv-bench/bin/python ] && .venv-bench/bin/python -c "import matplotlib" 2>/dev/null; then
  PY=.venv-bench/bin/python
  plot=(--plot "$OUT/pareto")
fi
"$PY" tools/fidelity_pareto.py "$OUT/results.json" "${plot[@]}" | tee "$OUT/pareto.md"
