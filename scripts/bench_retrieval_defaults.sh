#!/usr/bin/env bash
# The segment-reuse schemes on `retrieval`, the multi-document task that
# SmolLM2-135M answers with full recomputation (issue 28, item 4): each
# scheme's settings around its default, 100 prompts paired with full
# recomputation, then
#   - tools/fidelity_paired.py: accuracy minus full, 95% paired interval;
#   - tools/fidelity_pareto.py: KL against the share of K/V computed
#     (sparsex with boundary_layer=0 as a scheme of its own, "sparsex-b0").
#   - tools/scheme_defaults.py: each scheme's cheapest setting within 5
#     points and a mean KL of 0.05, written as OUT_DIR/defaults.json, the
#     per-model defaults file serve loads (copy it to profiles/ as
#     <model>.defaults.json; serve finds it by model id).
# The defaults in src/sharing/scheme.h were chosen from this run
# (docs/benchmarks.md, "Segment-reuse defaults from a retrieval task"), and
# profiles/smollm2-135m-instruct-q4_1.defaults.json is its file.
#   scripts/bench_retrieval_defaults.sh OUT_DIR [PROMPTS=100] [GEN=16]
# Extra bench-fidelity flags may follow in BENCH_FLAGS (e.g. --act-quant f32);
# AGENTKV names the binary (default build/agentkv), MODEL the GGUF (default:
# bench-fidelity's, the default model).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/bench_retrieval_defaults.sh OUT_DIR [PROMPTS] [GEN]}
PROMPTS=${2:-100} GEN=${3:-16}
mkdir -p "$OUT"
SCHEMES=naive,epic:16,epic:64,cacheblend:0.15,cacheblend:0.3,cacheblend:0.5
# The boundary layer is named: the default moved from 5 to 0 after this run.
SCHEMES+=,sparsex:0.15:boundary_layer=5,sparsex:0.5:boundary_layer=5
SCHEMES+=,sparsex:0.15:boundary_layer=0,sparsex:0.5:boundary_layer=0
echo "bench-fidelity retrieval: $PROMPTS prompts, $GEN generated tokens, $(nproc) threads, $(date -u '+%Y-%m-%d %H:%M UTC')" >&2
# shellcheck disable=SC2086 # BENCH_FLAGS is a list of flags
"${AGENTKV:-build/agentkv}" bench-fidelity --task retrieval --prompts "$PROMPTS" --gen "$GEN" --schemes "$SCHEMES" \
  ${MODEL:+-m "$MODEL"} ${BENCH_FLAGS:-} --json-out "$OUT/results.json" | tee "$OUT/bench.txt"
# The boundary-0 rows become a scheme of their own for the Pareto fronts.
.venv/bin/python - "$OUT/results.json" "$OUT/results-b0.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r.get("rows", []):
    if row["label"].endswith(":boundary_layer=0"):
        row["label"] = "sparsex-b0:" + row["label"].split(":")[1]
json.dump(r, open(sys.argv[2], "w"))
PY
.venv/bin/python tools/fidelity_paired.py "$OUT/results.json" | tee "$OUT/paired.md"
plot=()
PY=.venv/bin/python
if [ -x .venv-bench/bin/python ] && .venv-bench/bin/python -c "import matplotlib" 2>/dev/null; then
  PY=.venv-bench/bin/python
  plot=(--plot "$OUT/pareto")
fi
"$PY" tools/fidelity_pareto.py "$OUT/results-b0.json" --at 0.2,0.4,0.6 "${plot[@]}" | tee "$OUT/pareto.md"
.venv/bin/python tools/scheme_defaults.py "$OUT/results.json" --task retrieval --out "$OUT/defaults.json" \
  --command "scripts/bench_retrieval_defaults.sh OUT $PROMPTS $GEN${BENCH_FLAGS:+ (BENCH_FLAGS=$BENCH_FLAGS)}" \
  | tee "$OUT/defaults.md"
