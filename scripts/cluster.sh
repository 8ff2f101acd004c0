#!/usr/bin/env bash
# N agentkv replicas behind nginx, on loopback:
#   scripts/cluster.sh start [--replicas N] [--port PORT] [--kv-events ENDPOINT] [-- SERVE_FLAGS...]
#   scripts/cluster.sh status
#   scripts/cluster.sh stop
# nginx (Debian's nginx-light; scripts/setup.sh installs it) listens on
# 127.0.0.1:PORT (8080) and spreads requests over the replicas
# (127.0.0.1:PORT+1..PORT+N):
#   - `hash ... consistent` on the X-Session-ID header, so an agent session
#     stays on one replica (and its cache with it); requests without one go
#     anywhere;
#   - proxy_next_upstream, POSTs included: a request a replica could not
#     take or dropped before answering (down, refusing, killed) goes to the
#     next; a slow answer is not sent again (no retry on timeout). A completion has no effect but compute, so sending it again is
#     safe; nginx never retries once an answer (a stream) has begun, and the
#     client then gets the cut, as from one server. Admin calls (adapters,
#     segments) act on one replica: send them to each replica's own port.
# Every response says which replica served it (X-Agentkv-Upstream).
# --kv-events: each replica connects its KV cache events to ENDPOINT (a
# router's bound SUB socket) under the topic kv@replica-I (docs/cluster.md).
# SERVE_FLAGS go to every replica (e.g. --kv-sharing alora --adapter ...).
# State, logs and nginx.conf: $AGENTKV_CLUSTER_DIR (/tmp/agentkv-cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DIR=${AGENTKV_CLUSTER_DIR:-/tmp/agentkv-cluster}
BIN=${AGENTKV_BIN:-$root/build/agentkv}
say() { echo "[cluster] $*" >&2; }
usage() { sed -n '2,/^set /{/^set /d;p}' "$0" | sed 's/^# \{0,1\}//'; }

# A pid file whose process runs and is ours (agentkv or nginx; a zombie,
# killed but not yet reaped, is not running; a reused pid is not ours).
alive() {
  [ -f "$1" ] || return 1
  local st comm
  read -r st comm < <(ps -o stat=,comm= -p "$(cat "$1")" 2>/dev/null) || return 1
  [[ $st != Z* && ($comm == agentkv || $comm == nginx) ]]
}

stop() {
  if alive "$DIR/nginx.pid"; then
    nginx -p "$DIR" -c "$DIR/nginx.conf" -s quit 2>/dev/null || kill "$(cat "$DIR/nginx.pid")" 2>/dev/null || true
  fi
  for f in "$DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    if alive "$f"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi  # drains, then exits
  done
  for f in "$DIR"/replica-*.pid "$DIR/nginx.pid"; do
    [ -e "$f" ] || continue
    for _ in $(seq 1 100); do alive "$f" || break; sleep 0.1; done
    if alive "$f"; then kill -KILL "$(cat "$f")" 2>/dev/null || true; fi
    rm -f "$f"
  done
  say "stopped"
}

status() {
  [ -f "$DIR/port" ] || { say "not running"; return 1; }
  echo "nginx: 127.0.0.1:$(cat "$DIR/port") $(alive "$DIR/nginx.pid" && echo up || echo down)"
  for f in "$DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    i=${f##*/replica-}; i=${i%.pid}
    echo "replica $i: 127.0.0.1:$(cat "$DIR/replica-$i.port") pid $(cat "$f") $(alive "$f" && echo up || echo down)"
  done
}

start() {
  local n=2 port=8080 events="" flags=()
  while (($#)); do
    case $1 in
      --replicas) n=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --kv-events) events=$2; shift 2 ;;
      --) shift; flags=("$@"); break ;;
      -h | --help) usage; exit 0 ;;
      *) say "unknown option '$1' (see --help)"; exit 2 ;;
    esac
  done
  [[ $n =~ ^[1-9][0-9]?$ ]] || { say "--replicas must be 1-99"; exit 2; }
  [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port + n < 65536)) || { say "--port must leave room for $n replicas"; exit 2; }
  command -v nginx >/dev/null || { say "nginx is missing: scripts/setup.sh installs it (Debian's nginx-light)"; exit 1; }
  [ -x "$BIN" ] || { say "$BIN is missing: build it (scripts/setup.sh)"; exit 1; }
  [[ $events != *'*'* && $events != *::* ]] || {
    say "--kv-events must be a router's endpoint that the replicas connect to (tcp://HOST:PORT), not one they bind"; exit 2; }
  for f in "$DIR/nginx.pid" "$DIR"/replica-*.pid; do
    if alive "$f"; then say "already running (scripts/cluster.sh stop first)"; exit 1; fi
  done
  [[ $DIR != *[[:space:]\;\"\'{}]* ]] || { say "AGENTKV_CLUSTER_DIR may not contain spaces, quotes, ';' or braces (nginx.conf)"; exit 2; }
  mkdir -p "$DIR"
  rm -f "$DIR"/replica-*
  echo "$port" >"$DIR/port"
  local servers=""
  for i in $(seq 0 $((n - 1))); do
    local p=$((port + 1 + i)) ev=()
    [ -n "$events" ] && ev=(--kv-events "$events" --kv-events-topic "kv@replica-$i")
    "$BIN" serve --host 127.0.0.1 --port "$p" "${ev[@]}" "${flags[@]}" </dev/null >"$DIR/replica-$i.log" 2>&1 &
    echo $! >"$DIR/replica-$i.pid"
    echo "$p" >"$DIR/replica-$i.port"
    servers+="    server 127.0.0.1:$p max_fails=1 fail_timeout=2s;"$'\n'
  done
  cat >"$DIR/nginx.conf" <<CONF
daemon on;
pid $DIR/nginx.pid;
error_log $DIR/nginx-error.log warn;
worker_processes 1;
events { worker_connections 1024; }
http {
  access_log $DIR/nginx-access.log;
  client_body_temp_path $DIR/tmp-body;
  proxy_temp_path $DIR/tmp-proxy;
  fastcgi_temp_path $DIR/tmp-fastcgi;
  uwsgi_temp_path $DIR/tmp-uwsgi;
  scgi_temp_path $DIR/tmp-scgi;
  client_max_body_size 64m;
  # A session sticks to one replica; a request without one goes anywhere.
  map \$http_x_session_id \$agentkv_affinity {
    "" \$request_id;
    default \$http_x_session_id;
  }
  upstream agentkv {
    hash \$agentkv_affinity consistent;
$servers    keepalive 32;
  }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://agentkv;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
      proxy_connect_timeout 2s;
      proxy_next_upstream error http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 3;
      add_header X-Agentkv-Upstream \$upstream_addr always;
    }
  }
}
CONF
  for i in $(seq 0 $((n - 1))); do
    local p=$((port + 1 + i)) ok=""
    for _ in $(seq 1 600); do
      alive "$DIR/replica-$i.pid" || { tail -20 "$DIR/replica-$i.log" >&2; say "replica $i died"; stop; exit 1; }
      if curl -sf "http://127.0.0.1:$p/health" >/dev/null; then ok=1; break; fi
      sleep 0.2
    done
    [ -n "$ok" ] || { say "replica $i not ready in 120 s"; stop; exit 1; }
  done
  nginx -p "$DIR" -c "$DIR/nginx.conf" || { say "nginx did not start: $DIR/nginx-error.log"; stop; exit 1; }
  say "$n replicas behind http://127.0.0.1:$port (logs in $DIR)"
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  -h | --help | "") usage ;;
  *) say "unknown command '$1' (start, status, stop)"; exit 2 ;;
esac
