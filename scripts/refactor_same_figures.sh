#!/usr/bin/env bash
# A refactor keeps behaviour bit for bit: runs bench-fidelity (every
# approximate scheme, on tasks with cached documents and relayed agents) and
# bench-agents (every workload, every scheme) with two agentkv binaries on
# the same seeds, and compares their figures, timing aside
# (tools/same_figures.py). Small shapes: a few minutes on two cores.
#
#   scripts/refactor_same_figures.sh BEFORE_BIN AFTER_BIN [OUT_DIR] [THREADS]
#
# Build BEFORE_BIN from the commit before the refactor, e.g.
#   git worktree add /tmp/before <commit> && cmake -S /tmp/before -B /tmp/before/build -DCMAKE_BUILD_TYPE=Release \
#     && cmake --build /tmp/before/build -j2 --target agentkv
set -euo pipefail
if [[ $# -lt 2 || $1 == -h || $1 == --help ]]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  [[ ${1:-} == -h || ${1:-} == --help ]] && exit 0 || exit 2
fi
before=$1 after=$2 out=${3:-/tmp/same_figures} threads=${4:-1}
cd "$(dirname "$0")/.."
mkdir -p "$out"
run() {  # NAME IGNORE ARGS...: runs both binaries, compares (IGNORE: a key regex, or '')
  local name=$1 ignore=$2
  shift 2
  for side in before after; do
    local bin=$before
    [[ $side == after ]] && bin=$after
    echo "[same-figures] $name ($side)" >&2
    "$bin" "$@" --threads "$threads" --json-out "$out/$name.$side.json" > "$out/$name.$side.log" 2>&1
  done
  python3 tools/same_figures.py "$out/$name.before.json" "$out/$name.after.json" ${ignore:+--ignore "$ignore"}
}
status=0
run fidelity "" bench-fidelity --task retrieval,agents,chat --prompts 3 --gen 8 \
  --schemes naive,epic,cacheblend,sparsex,sparsex:boundary_layer=5,relay,relay:prefix_tokens=16 || status=1
# Its adapter_cached depends on arrival: the two adapters' requests go in
# together, and when the second is admitted a step after the first it finds
# the first's blocks cached (one binary: 0.744 in 4 runs, 0.837 once with the
# other core busy, 2026-12-07).
run alora '^adapter_cached$' bench-agents --workload alora-pipeline --prompt-lens 64,200 --base-tokens 16 --adapter-tokens 4 \
  --adapters 2 || status=1
# Its peak kv_blocks depends on step timing (9 or 10 from run to run of one binary).
run icarus '^kv_(blocks|mib)$' bench-agents --workload icarus-round-robin --agents 3 --turns 4 --start-len 128 --turn-tokens 8 || status=1
run lragent "" bench-agents --workload lragent-trace --ctx-lens 256 \
  --schemes none,full,droidspeak,lragent-base,lragent-baselr || status=1
run team "" bench-agents --workload team-docs --team-agents 2 --team-docs 4 --team-doc-tokens 64 --team-context 128 \
  --team-turns 2 || status=1
exit $status
