#!/usr/bin/env bash
# RelayCaching on the agents task under each reading of the profile rules
# (issue 28, item 3; docs/usage.md, "profile-relay"), with the ablation of
# its accuracy gap against epic: relay with epic's first tokens recomputed
# too (prefix_tokens). Layers are given explicitly, from
# `profile-relay --samples 128 --bootstrap 2000` on SmolLM2-135M:
#   flip + literal        l_start 1, l_det 8, l_end 30  (the committed profile)
#   onset + literal       l_det 5 (ONSET_DET)
#   flip + before-tail    l_end 19
# Then tools/fidelity_paired.py: accuracy minus full (paired 95%), and each
# scheme's mean KL as a ratio to the committed reading's (paired bootstrap).
#   scripts/bench_relay_readings.sh OUT_DIR [PROMPTS=60] [SEED=11] [ONSET_DET=5]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/bench_relay_readings.sh OUT_DIR [PROMPTS] [SEED] [ONSET_DET]}
PROMPTS=${2:-60} SEED=${3:-11} ONSET_DET=${4:-5}
mkdir -p "$OUT"
LIT=relay:l_start=1:l_det=8:l_end=30
SCHEMES=epic:16,$LIT,relay:l_start=1:l_det=$ONSET_DET:l_end=30,relay:l_start=1:l_det=8:l_end=19
SCHEMES+=,relay:l_start=1:l_det=$ONSET_DET:l_end=19,$LIT:prefix_tokens=16
echo "bench-fidelity agents: $PROMPTS prompts, seed $SEED, $(nproc) threads, $(date -u '+%Y-%m-%d %H:%M UTC')" >&2
build/agentkv bench-fidelity --task agents --prompts "$PROMPTS" --seed "$SEED" --gen 24 --schemes "$SCHEMES" \
  --json-out "$OUT/results.json" | tee "$OUT/bench.txt"
.venv/bin/python tools/fidelity_paired.py --kl-base "$LIT" "$OUT/results.json" | tee "$OUT/paired.md"
