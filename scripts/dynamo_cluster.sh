#!/usr/bin/env bash
# N agentkv replicas as NVIDIA Dynamo workers behind Dynamo's frontend and
# KV-aware router, on one host, CPU only, with no etcd or NATS:
#   scripts/dynamo_cluster.sh start --model MODEL.gguf [--replicas N] [--port PORT]
#                                   [--router-mode kv|round-robin] [-- SERVE_FLAGS...]
# SERVE_FLAGS go to every replica; their `--adapter NAME=...` adapters are
# served through Dynamo as LoRA models named NAME.
#   scripts/dynamo_cluster.sh restart-frontend   (the router relearns from the workers)
#   scripts/dynamo_cluster.sh status
#   scripts/dynamo_cluster.sh stop
# Dynamo's frontend (`python -m dynamo.frontend`) listens on 127.0.0.1:PORT
# (8090) and speaks the OpenAI API; replica I serves on PORT+1+I and
# publishes its KV events on ipc://$AGENTKV_DYNAMO_DIR/events-I (bound by the
# replica, reachable only on this host), which its worker
# (tools/dynamo/worker.py) hands to the router. Discovery is Dynamo's file
# backend in $AGENTKV_DYNAMO_DIR/discovery; events go over ZeroMQ. The
# frontend tokenizes with the HF directory tools/dynamo/hf_dir.py writes
# from the GGUF. scripts/setup_dynamo.sh installs Dynamo into .venv-dynamo.
# The router runs one event thread (--router-event-threads 1): with more,
# Dynamo 1.6.1 was seen to reject stores whose parent another thread had
# not yet applied. --migration-limit 3: a request whose worker lost its
# replica is sent to another worker (tools/dynamo/worker.py leaves Dynamo
# when its replica dies). State and logs: $AGENTKV_DYNAMO_DIR (/tmp/agentkv-dynamo).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DIR=${AGENTKV_DYNAMO_DIR:-/tmp/agentkv-dynamo}
BIN=${AGENTKV_BIN:-$root/build/agentkv}
PY=${AGENTKV_DYNAMO_PY:-$root/.venv-dynamo/bin/python}
say() { echo "[dynamo-cluster] $*" >&2; }
usage() { sed -n '2,/^set /{/^set /d;p}' "$0" | sed 's/^# \{0,1\}//'; }

alive() {  # a pid file whose process runs (not a zombie)
  [ -f "$1" ] || return 1
  local st
  st=$(ps -o stat= -p "$(cat "$1")" 2>/dev/null) || return 1
  [[ $st != Z* ]]
}

stop() {
  for f in "$DIR"/frontend.pid "$DIR"/worker-*.pid "$DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    if alive "$f"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
  done
  for f in "$DIR"/frontend.pid "$DIR"/worker-*.pid "$DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    for _ in $(seq 1 100); do alive "$f" || break; sleep 0.1; done
    if alive "$f"; then kill -KILL "$(cat "$f")" 2>/dev/null || true; fi
    rm -f "$f"
  done
  say "stopped"
}

status() {
  [ -f "$DIR/port" ] || { say "not running"; return 1; }
  echo "frontend: 127.0.0.1:$(cat "$DIR/port") $(alive "$DIR/frontend.pid" && echo up || echo down)"
  for f in "$DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    i=${f##*/replica-}; i=${i%.pid}
    echo "replica $i: 127.0.0.1:$(cat "$DIR/replica-$i.port") $(alive "$f" && echo up || echo down)," \
      "worker $(alive "$DIR/worker-$i.pid" && echo up || echo down)"
  done
}

wait_http() {  # URL, what, pid file: until URL answers 200 with text matching $4
  for _ in $(seq 1 600); do
    alive "$3" || return 1
    curl -sf "$1" 2>/dev/null | grep -q -- "${4:-}" && return 0
    sleep 0.2
  done
  return 1
}

start_frontend() {
  DYN_FILE_KV="$DIR/discovery" "$PY" -m dynamo.frontend --discovery-backend file --router-mode "$(cat "$DIR/mode")" \
    --http-host 127.0.0.1 --http-port "$(cat "$DIR/port")" --router-event-threads 1 --migration-limit 3 </dev/null >>"$DIR/frontend.log" 2>&1 &
  echo $! >"$DIR/frontend.pid"
}

restart_frontend() {
  [ -f "$DIR/model" ] || { say "not running"; exit 1; }
  if alive "$DIR/frontend.pid"; then kill -TERM "$(cat "$DIR/frontend.pid")"; fi
  for _ in $(seq 1 100); do alive "$DIR/frontend.pid" || break; sleep 0.1; done
  if alive "$DIR/frontend.pid"; then kill -KILL "$(cat "$DIR/frontend.pid")" 2>/dev/null || true; fi
  start_frontend
  wait_http "http://127.0.0.1:$(cat "$DIR/port")/v1/models" "" "$DIR/frontend.pid" "$(cat "$DIR/model")" ||
    { tail -20 "$DIR/frontend.log" >&2; say "the frontend did not come back"; exit 1; }
  say "frontend restarted"
}

start() {
  local n=2 port=8090 mode=kv model="" flags=()
  while (($#)); do
    case $1 in
      --replicas) n=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --router-mode) mode=$2; shift 2 ;;
      --model) model=$2; shift 2 ;;
      --) shift; flags=("$@"); break ;;
      -h | --help) usage; exit 0 ;;
      *) say "unknown option '$1' (see --help)"; exit 2 ;;
    esac
  done
  [ -n "$model" ] && [ -f "$model" ] || { say "--model must name the GGUF file the replicas serve"; exit 2; }
  [[ $n =~ ^[1-9][0-9]?$ ]] || { say "--replicas must be 1-99"; exit 2; }
  [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port + n < 65536)) || { say "--port must leave room above it"; exit 2; }
  [[ $mode == kv || $mode == round-robin ]] || { say "--router-mode must be kv or round-robin"; exit 2; }
  [ -x "$PY" ] || { say "$PY is missing: run scripts/setup_dynamo.sh"; exit 1; }
  [ -x "$BIN" ] || { say "$BIN is missing: build it (scripts/setup.sh)"; exit 1; }
  for f in "$DIR"/*.pid; do
    if alive "$f"; then say "already running (scripts/dynamo_cluster.sh stop first)"; exit 1; fi
  done
  mkdir -p "$DIR"
  rm -rf "$DIR"/replica-* "$DIR"/worker-* "$DIR"/events-* "$DIR/discovery" "$DIR/hf"
  echo "$port" >"$DIR/port"
  export DYN_FILE_KV="$DIR/discovery" DYN_DISCOVERY_BACKEND=file
  "$PY" tools/dynamo/hf_dir.py "$model" "$DIR/hf" >/dev/null || { say "cannot make a tokenizer directory from $model"; exit 1; }
  local name adapters=() prev=""
  name=$(basename "$model" .gguf)
  # Each `--adapter NAME=PATH[:KIND]` of the replicas is registered with
  # Dynamo as a LoRA named NAME, the name the replicas' events carry.
  for f in "${flags[@]}"; do
    if [[ $prev == --adapter ]]; then adapters+=(--adapter "${f%%=*}"); fi
    if [[ $f == --adapter=* ]]; then v=${f#--adapter=}; adapters+=(--adapter "${v%%=*}"); fi
    prev=$f
  done
  for i in $(seq 0 $((n - 1))); do
    local p=$((port + 1 + i))
    "$BIN" serve --host 127.0.0.1 --port "$p" --model "$model" --kv-events "ipc://$DIR/events-$i" \
      "${flags[@]}" </dev/null >"$DIR/replica-$i.log" 2>&1 &
    echo $! >"$DIR/replica-$i.pid"
    echo "$p" >"$DIR/replica-$i.port"
  done
  for i in $(seq 0 $((n - 1))); do
    wait_http "http://127.0.0.1:$((port + 1 + i))/health" "" "$DIR/replica-$i.pid" ||
      { tail -20 "$DIR/replica-$i.log" >&2; say "replica $i did not start"; stop; exit 1; }
  done
  echo "$mode" >"$DIR/mode"
  start_frontend
  for i in $(seq 0 $((n - 1))); do
    "$PY" tools/dynamo/worker.py --agentkv "http://127.0.0.1:$((port + 1 + i))" \
      --kv-events "ipc://$DIR/events-$i" --model-dir "$DIR/hf" --served-model-name "$name" "${adapters[@]}" \
      </dev/null >"$DIR/worker-$i.log" 2>&1 &
    echo $! >"$DIR/worker-$i.pid"
  done
  wait_http "http://127.0.0.1:$port/v1/models" "" "$DIR/frontend.pid" "$name" ||
    { tail -20 "$DIR/frontend.log" "$DIR"/worker-*.log >&2; say "the frontend did not list $name"; stop; exit 1; }
  # Every worker registered: the frontend's instances appear in discovery.
  for _ in $(seq 1 300); do
    (($(find "$DIR/discovery" -path '*instances*' -type f | grep -c generate || true) >= n)) && break
    sleep 0.2
  done
  echo "$name" >"$DIR/model"
  say "$n replicas behind Dynamo's $mode router at http://127.0.0.1:$port (model $name; logs in $DIR)"
}

case ${1:-} in
  start) shift; start "$@" ;;
  restart-frontend) restart_frontend ;;
  stop) stop ;;
  status) status ;;
  -h | --help | "") usage ;;
  *) say "unknown command '$1' (start, restart-frontend, status, stop)"; exit 2 ;;
esac
