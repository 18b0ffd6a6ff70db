#!/bin/sh
# A throwaway single-node etcd for shell-driven tests (the Rust equivalent is
# cairn_config::testing::Etcd).
#
#   DIR=$(mktemp -d); EP=$(tests/support/etcd.sh start "$DIR")   # prints http://127.0.0.1:PORT
#   tests/support/etcd.sh stop "$DIR"                             # SIGKILL by pid, rm -rf DIR
#
# Listens on 127.0.0.1 only, on a free client/peer port pair; data, log and pid live in DIR.
set -eu

ETCD=${CAIRN_ETCD:-/usr/bin/etcd}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    dir=$1
    mkdir -p "$dir"
    cport=$(free_port)
    pport=$(free_port)
    while [ "$pport" = "$cport" ]; do pport=$(free_port); done
    curl_="http://127.0.0.1:$cport"
    purl="http://127.0.0.1:$pport"
    "$ETCD" --name=t --data-dir="$dir/data" \
        --listen-client-urls="$curl_" --advertise-client-urls="$curl_" \
        --listen-peer-urls="$purl" --initial-advertise-peer-urls="$purl" \
        --initial-cluster="t=$purl" \
        --heartbeat-interval=20 --election-timeout=200 \
        --logger=zap --log-level=warn >"$dir/etcd.log" 2>&1 </dev/null &
    echo $! >"$dir/etcd.pid"
    echo "$curl_" >"$dir/endpoint"
    i=0
    while [ $i -lt 200 ]; do
        if python3 - "$cport" <<'PY' 2>/dev/null; then echo "$curl_"; return 0; fi
import sys, urllib.request
body = urllib.request.urlopen("http://127.0.0.1:%s/health" % sys.argv[1], timeout=0.5).read()
sys.exit(0 if b'"health":"true"' in body else 1)
PY
        if ! kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null; then
            echo "etcd exited early:" >&2; cat "$dir/etcd.log" >&2; return 1
        fi
        sleep 0.1
        i=$((i + 1))
    done
    echo "etcd not healthy after 20s:" >&2; cat "$dir/etcd.log" >&2
    stop "$dir"
    return 1
}

stop() {
    dir=$1
    if [ -f "$dir/etcd.pid" ]; then
        pid=$(cat "$dir/etcd.pid")
        kill -KILL "$pid" 2>/dev/null || true
        # Bounded: an unreaped zombie still answers kill -0.
        n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
    fi
    rm -rf "$dir"
}

case "${1:-}" in
start) start "$2" ;;
stop) stop "$2" ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
