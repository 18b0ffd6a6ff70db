# shellcheck shell=bash
# shellcheck disable=SC2034 # FX_* variables are for the scenarios that source this
# Fault-suite harness: a real Cairn cluster where etcd, every cairnd node and every client
# runs in its own network namespace, all joined by a bridge that lives in a namespace of
# its own. No address is ever configured outside these namespaces; the subnet is
# 10.77.0.0/24 on the test's private bridge:
#
#   switch ns  cf<ID>-sw : bridge br0, one veth end per member (sw-<member>)
#   etcd       cf<ID>-etcd  10.77.0.2   (client 2379, peer 2380; TLS with client
#                                         certificates and auth, scripts/etcd-tls.sh)
#   node nK    cf<ID>-nK    10.77.0.1K  (cairnd on :7420)
#   client cK  cf<ID>-cK    10.77.0.10K (workload drivers, cairn CLI)
#
# Faults: fx_kill9 NODE, fx_isolate/fx_reconnect MEMBER (switch-side link down/up),
# fx_partition "A B" "C D" / fx_unpartition (blackhole routes between the two sides),
# fx_etcd_kill9 / fx_start_etcd, fx_wipe_node_bricks NODE, fx_bitflip FILE.
# An EXIT trap stops every process the scenario started (by pid) and deletes the
# namespaces (which deletes the veths and the bridge). The temp dir is kept on failure.
#
# Env: CAIRN_BIN_DIR (default backend/target/debug), CAIRN_TEST_KEEP=1 keeps the temp dir,
#      FX_SEED (workload seed; default random, always logged), FX_LEASE_TTL (default 3),
#      FX_LOG_LEVEL (cairnd --log-level, default info; e.g. cairnd=debug).

FX_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
FX_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/support/netns.sh
. "$FX_REPO/tests/support/netns.sh"
# shellcheck source=scripts/etcd-tls.sh
. "$FX_REPO/scripts/etcd-tls.sh"
CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$FX_REPO/backend/target/debug}
FX_TAG=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
FX_ID=${FX_ID:-$$}
FX_NS=cf$FX_ID
FX_NET=10.77.0
FX_SEED=${FX_SEED:-$((RANDOM * 32768 + RANDOM))}
FX_LEASE_TTL=${FX_LEASE_TTL:-3}
FX_PY=$(python3 -c 'import sys; print(sys.executable)')
FX_DIR=
FX_VOLUME=vol0
FX_MEMBERS=()
FX_NODES=()
FX_ETCD_PID=
declare -A FX_IP=()
declare -A FX_PID=()
FX_CHECKS=0

fx_log() { printf '%s [%s] %s\n' "$(date +%T.%3N)" "$FX_TAG" "$*" >&2; }

fx_pass() {
    FX_CHECKS=$((FX_CHECKS + 1))
    echo "ok - $*"
}

# fx_fail MSG: report, show log tails, end the scenario (exit 1; the trap cleans up).
fx_fail() {
    fx_show_logs >&2
    echo "FAIL - [$FX_TAG seed=$FX_SEED] $*" >&2
    exit 1
}

# fx_soft_fail MSG: record a failed check but go on (the scenario fails at fx_finish).
FX_SOFT_FAILS=()
fx_soft_fail() {
    FX_SOFT_FAILS+=("$*")
    echo "not ok - $*" >&2
}

# fx_skip REASON: a missing package, tool or privilege (failed under CI, see run.sh).
fx_skip() {
    echo "SKIP - $*"
    exit 77
}

# fx_skip_kernel WHAT SCENARIO: this kernel lacks WHAT; make vm-test SCENARIO covers it.
fx_skip_kernel() {
    echo "SKIP-KERNEL: $1 (covered by make vm-test SCENARIO=$2)"
    exit 77
}

fx_show_logs() {
    local f
    [[ -n $FX_DIR && -d $FX_DIR/log ]] || return 0
    for f in "$FX_DIR"/log/cairnd-*.log; do
        [[ -s $f ]] || continue
        echo "--- warnings/errors in $f (last 15)"
        grep -E 'WARN|ERROR' "$f" | tail -n 15
    done
}

fx_init() {
    [[ -z $FX_DIR ]] || return 0
    local b
    for b in cairnd cairn libcairn.so; do
        [[ -e $CAIRN_BIN_DIR/$b ]] || fx_fail "$CAIRN_BIN_DIR/$b missing: build first"
    done
    command -v etcd >/dev/null || fx_fail "etcd not installed"
    ((EUID == 0)) || fx_skip "network namespaces need root"
    ip netns add "$FX_NS-probe" 2>/dev/null || fx_skip "cannot create network namespaces here"
    ip netns del "$FX_NS-probe"
    FX_DIR=$(mktemp -d "${CAIRN_TEST_TMP:-${TMPDIR:-/tmp}}/cairn-faults.XXXXXX")
    mkdir -p "$FX_DIR"/{log,state,bricks,etcd,hist}
    trap fx_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    fx_log "seed=$FX_SEED dir=$FX_DIR (replay with FX_SEED=$FX_SEED)"
    netns_switch "$FX_NS" || fx_fail "cannot make the test network $FX_NS-sw"
}

# fx_member NAME IP: a namespace cf<ID>-NAME with eth0 = IP/24, cabled to the bridge.
fx_member() {
    local name=$1 ip=$2
    netns_member "$FX_NS" "$name" "$ip" || fx_fail "cannot add $name ($ip) to the test network"
    FX_IP[$name]=$ip
    FX_MEMBERS+=("$name")
}

fx_in() {
    local ns=$FX_NS-$1
    shift
    ip netns exec "$ns" "$@"
}

fx_cleanup() {
    local rc=$? name pid ns
    trap - EXIT
    for name in "${!FX_PID[@]}"; do
        pid=${FX_PID[$name]}
        [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
    done
    [[ -n $FX_ETCD_PID ]] && kill -KILL "$FX_ETCD_PID" 2>/dev/null
    # Anything else still running inside our namespaces was started by this scenario
    # (workload drivers, CLI calls): end it by pid.
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$FX_NS-"); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null
        done
    done
    sleep 0.2
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$FX_NS-"); do
        ip netns del "$ns" 2>/dev/null || true
    done
    if ((rc == 0 || rc == 77)) && [[ ${CAIRN_TEST_KEEP:-} != 1 ]]; then
        rm -rf "$FX_DIR"
    elif [[ -n $FX_DIR ]]; then
        echo "[$FX_TAG] test dir kept: $FX_DIR" >&2
    fi
    exit "$rc"
}

# fx_wait_gone PID: until PID has exited (a zombie counts as gone).
fx_wait_gone() {
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -d /proc/$1 && $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]] || return 0
        sleep 0.05
    done
}

fx_wait_tcp() { # MEMBER_FROM IP PORT TIMEOUT
    local from=$1 ip=$2 port=$3 t=$4 i
    for ((i = 0; i < t * 5; i++)); do
        fx_in "$from" timeout 1 bash -c "exec 3<>/dev/tcp/$ip/$port" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

fx_start_etcd() {
    local ip=${FX_IP[etcd]} tls=() lib=$FX_REPO/scripts/etcd-tls.sh
    etcd_tls_make "$FX_DIR/etcd-tls" "$ip" || fx_fail "cannot make the etcd certificates"
    mapfile -t tls < <(etcd_tls_server_args "$FX_DIR/etcd-tls")
    ip netns exec "$FX_NS-etcd" setsid etcd --name fx --data-dir "$FX_DIR/etcd" "${tls[@]}" \
        --listen-client-urls "https://$ip:2379" --advertise-client-urls "https://$ip:2379" \
        --listen-peer-urls "https://$ip:2380" --initial-advertise-peer-urls "https://$ip:2380" \
        --initial-cluster "fx=https://$ip:2380" \
        --heartbeat-interval=50 --election-timeout=500 \
        </dev/null >>"$FX_DIR/log/etcd.log" 2>&1 &
    FX_ETCD_PID=$!
    disown "$FX_ETCD_PID"
    fx_wait_tcp etcd "$ip" 2379 30 || fx_fail "etcd on $ip:2379 not up after 30s"
    local i
    for ((i = 0; i < 100; i++)); do
        # shellcheck disable=SC2016 # expanded by the inner bash
        if fx_in etcd bash -c '. "$1" && etcd_tls_healthy "$2" "$3"' _ "$lib" "https://$ip:2379" "$FX_DIR/etcd-tls"; then
            # shellcheck disable=SC2016
            fx_in etcd bash -c '. "$1" && etcd_tls_auth "$2" "$3" /cairn' _ "$lib" "https://$ip:2379" "$FX_DIR/etcd-tls" ||
                fx_fail "cannot turn etcd auth on"
            return 0
        fi
        sleep 0.2
    done
    fx_fail "etcd not healthy"
}

fx_etcd_kill9() {
    [[ -n $FX_ETCD_PID ]] && kill -KILL "$FX_ETCD_PID" 2>/dev/null
    wait "$FX_ETCD_PID" 2>/dev/null
    FX_ETCD_PID=
    fx_log "etcd killed (SIGKILL)"
}

fx_start_node() {
    local name=$1 ip=${FX_IP[$1]} tls=()
    mkdir -p "$FX_DIR/state/$name"
    mapfile -t tls < <(etcd_tls_cairnd_args "$FX_DIR/etcd-tls")
    ip netns exec "$FX_NS-$name" setsid "$CAIRN_BIN_DIR/cairnd" --name "$name" --listen "$ip:7420" \
        --etcd "https://${FX_IP[etcd]}:2379" "${tls[@]}" --state-dir "$FX_DIR/state/$name" \
        --lease-ttl "$FX_LEASE_TTL" --log-level "${FX_LOG_LEVEL:-info}" --log-file "$FX_DIR/log/cairnd-$name.log" \
        </dev/null >>"$FX_DIR/log/cairnd-$name.out" 2>&1 &
    FX_PID[$name]=$!
    disown "${FX_PID[$name]}"
    fx_wait_tcp "$name" "$ip" 7420 30 || fx_fail "cairnd $name does not listen on $ip:7420"
    [[ $(cat "/proc/${FX_PID[$name]}/comm" 2>/dev/null) == cairnd ]] ||
        fx_fail "pid ${FX_PID[$name]} is not cairnd $name"
    fx_log "cairnd $name started (pid ${FX_PID[$name]})"
}

fx_kill9() {
    local name=$1 pid=${FX_PID[$1]:-}
    [[ -n $pid ]] || return 0
    kill -KILL "$pid" 2>/dev/null
    fx_wait_gone "$pid"
    FX_PID[$name]=
    fx_log "cairnd $name killed (SIGKILL)"
}

fx_stop_node() { # graceful: SIGTERM, SIGKILL after 10 s
    local name=$1 pid=${FX_PID[$1]:-} i
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 100; i++)); do
        [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    fx_wait_gone "$pid"
    FX_PID[$name]=
    fx_log "cairnd $name stopped (SIGTERM)"
}

# fx_cli ARGS: the cairn CLI, run from the first client's namespace against node n1 (or
# FX_CLI_NODE).
fx_cli() {
    fx_in c1 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "${FX_IP[${FX_CLI_NODE:-n1}]}:7420" "$@"
}

# fx_cluster NODES SETS REPLICA: etcd, NODES cairnd, clients c1 c2, a SETSxREPLICA volume
# with bricks round-robin over the nodes (so each set spans distinct nodes).
fx_cluster() {
    local nodes=$1 sets=$2 replica=$3 i node bricks=()
    fx_init
    fx_member etcd "$FX_NET.2"
    for ((i = 1; i <= nodes; i++)); do
        fx_member "n$i" "$FX_NET.1$i"
        FX_NODES+=("n$i")
    done
    fx_member c1 "$FX_NET.101"
    fx_member c2 "$FX_NET.102"
    fx_start_etcd
    for node in "${FX_NODES[@]}"; do
        fx_start_node "$node"
        # n1 founds the cluster (the others join it by token): it listens before it looks
        # at the config store, so a node started next could found it first (seen once in
        # 29 runs: "host n1 is not in 'Peer in Cluster' state").
        [[ $node == "${FX_NODES[0]}" ]] || continue
        for ((i = 0; i < 150; i++)); do
            grep -q "founding the cluster" "$FX_DIR/log/cairnd-$node.log" 2>/dev/null && break
            sleep 0.2
        done
        ((i < 150)) || fx_fail "cairnd $node did not found the cluster within 30s"
    done
    local token
    for node in "${FX_NODES[@]:1}"; do
        # Join tokens are made only from a node of the cluster (not from client c1).
        token=$(fx_in n1 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "${FX_IP[n1]}:7420" \
            peer token create --ttl 10m 2>/dev/null) || fx_fail "peer token create"
        fx_cli peer probe "${FX_IP[$node]}:7420" --token "$token" >/dev/null ||
            fx_fail "peer probe $node"
    done
    for ((i = 0; i < sets * replica; i++)); do
        node=${FX_NODES[i % nodes]}
        mkdir -p "$FX_DIR/bricks/b$i"
        bricks+=("$node:$FX_DIR/bricks/b$i")
    done
    fx_cli volume create "$FX_VOLUME" replica "$replica" "${bricks[@]}" >/dev/null ||
        fx_fail "volume create $FX_VOLUME replica $replica ${bricks[*]}"
    fx_cli volume start "$FX_VOLUME" >/dev/null || fx_fail "volume start"
    fx_wait_healthy 60 || fx_fail "volume not healthy after start"
    fx_log "cluster up: $nodes nodes, ${sets}x$replica volume"
}

fx_servers() {
    local node out=()
    for node in "${FX_NODES[@]}"; do out+=("${FX_IP[$node]}:7420"); done
    (
        IFS=,
        echo "${out[*]}"
    )
}

# fx_status: one line per brick "index node state pending".
fx_status() {
    local n
    for n in "${FX_NODES[@]}"; do
        [[ -n ${FX_PID[$n]:-} ]] || continue
        FX_CLI_NODE=$n fx_cli --json volume status "$FX_VOLUME" 2>/dev/null | "$FX_PY" -c '
import json, sys
doc = json.load(sys.stdin)
for v in doc["volumes"]:
    for b in v["bricks"]:
        print(b["index"], b["node"], b["state"], b.get("pending_heal", 0))
' && return 0
    done
    return 1
}

# fx_wait_healthy TIMEOUT: every brick up and nothing pending heal.
fx_wait_healthy() {
    local t=$1 i st
    for ((i = 0; i < t; i++)); do
        st=$(fx_status) && [[ -n $st ]] && ! grep -qviE ' up 0$' <<<"$st" && return 0
        sleep 1
    done
    fx_log "not healthy after ${t}s: $(tr '\n' ';' <<<"$st")"
    return 1
}

# fx_workload CLIENT MODE NAME DURATION [extra args]: run a workload driver in CLIENT's
# namespace in the background; sets FX_WL_PID. History: $FX_DIR/hist/NAME.jsonl.
fx_workload() {
    local client=$1 mode=$2 name=$3 dur=$4
    shift 4
    ip netns exec "$FX_NS-$client" "$FX_PY" "$FX_LIB/workload.py" run --lib "$CAIRN_BIN_DIR/libcairn.so" \
        --servers "$(fx_servers)" --volume "$FX_VOLUME" --mode "$mode" --seed "$FX_SEED" \
        --client "$name" --duration "$dur" --history "$FX_DIR/hist/$name.jsonl" "$@" \
        >>"$FX_DIR/log/workload-$name.log" 2>&1 &
    FX_WL_PID=$!
    FX_PID[wl-$name]=$FX_WL_PID
}

# fx_bulk CLIENT NAME COUNT: create COUNT files with known contents (foreground).
fx_bulk() {
    local t0=$SECONDS
    fx_in "$1" timeout 300 "$FX_PY" "$FX_LIB/workload.py" bulk --lib "$CAIRN_BIN_DIR/libcairn.so" \
        --servers "$(fx_servers)" --volume "$FX_VOLUME" --seed "$FX_SEED" --count "$3" \
        --history "$FX_DIR/hist/$2.jsonl" >>"$FX_DIR/log/workload-$2.log" 2>&1 ||
        fx_fail "bulk create of $3 files failed (log: $FX_DIR/log/workload-$2.log)"
    fx_log "bulk: $3 files created in $((SECONDS - t0))s"
}

# fx_wait_state STATE TIMEOUT: some brick is in STATE (e.g. healing).
fx_wait_state() {
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        fx_status 2>/dev/null | grep -qi " $1 " && return 0
        sleep 0.2
    done
    return 1
}

# fx_bitflip FILE OFFSET: flip one bit of FILE at OFFSET, behind Cairn's back.
fx_bitflip() {
    "$FX_PY" - "$1" "$2" <<'PY'
import os, sys
p, off = sys.argv[1], int(sys.argv[2])
fd = os.open(p, os.O_RDWR)
b = os.pread(fd, 1, off) or b"\0"
os.pwrite(fd, bytes([b[0] ^ 0x10]), off)
os.fsync(fd)
os.close(fd)
PY
    fx_log "flipped a bit of $1 at offset $2"
}

# fx_wait_workload PID NAME: wait for the driver; fail if it crashed.
fx_wait_workload() {
    local pid=$1 name=$2 rc
    wait "$pid"
    rc=$?
    FX_PID[wl-$name]=
    tail -n 3 "$FX_DIR/log/workload-$name.log" >&2
    ((rc == 0)) || fx_fail "workload $name exited $rc (log: $FX_DIR/log/workload-$name.log)"
}

# fx_verify MODE HIST...: final reads through a fresh mount + linearizability / model check.
fx_verify() {
    local mode=$1
    shift
    local h args=()
    for h in "$@"; do args+=(--history "$FX_DIR/hist/$h.jsonl"); done
    local rc=0 log=$FX_DIR/log/verify-$mode.log why
    fx_in c1 timeout 120 "$FX_PY" "$FX_LIB/workload.py" verify --lib "$CAIRN_BIN_DIR/libcairn.so" \
        --servers "$(fx_servers)" --volume "$FX_VOLUME" --mode "$mode" "${args[@]}" \
        >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
        tail -n 2 "$log" >&2
        fx_pass "$mode: acknowledged data readable and history linearizable"
    else
        tail -n 25 "$log" >&2
        # The first problems, in the one line the suite prints (CI shows only that line).
        why=$(grep -m 3 -E 'HUNG|VIOLATION|stale read|MISMATCH|LOST|wrong contents|Error|FAILED' "$log" |
            cut -c 1-240 | tr '\n' ' ')
        ((rc == 124)) && why="verify timed out after 120 s; $why"
        fx_soft_fail "$mode verification failed: ${why:-exit $rc} (full report: $log)"
    fi
}

# fx_verify_replicas: every replica set's bricks hold identical trees (read directly).
fx_verify_replicas() {
    local sets
    sets=$(fx_cli --json volume info "$FX_VOLUME" | "$FX_PY" -c '
import json, sys
doc = json.load(sys.stdin)
vols = doc.get("volumes", [doc]) if isinstance(doc, dict) else doc
for v in vols:
    for s in v["sets"]:
        print(" ".join(b["path"] for b in s["bricks"]))
') || fx_fail "volume info"
    local l args=()
    while read -r l; do args+=(--set "$l"); done <<<"$sets"
    if "$FX_PY" "$FX_LIB/replicas.py" "${args[@]}" >"$FX_DIR/log/replicas.log" 2>&1; then
        tail -n 1 "$FX_DIR/log/replicas.log" >&2
        fx_pass "replicas identical on every brick of every set"
    else
        head -n 30 "$FX_DIR/log/replicas.log" >&2
        fx_soft_fail "replicas differ (full report: $FX_DIR/log/replicas.log)"
    fi
}

# fx_isolate MEMBER / fx_reconnect MEMBER: cut / restore its cable at the switch.
fx_isolate() {
    ip -n "$FX_NS-sw" link set "sw-$1" down
    fx_log "$1 isolated (link down)"
}
fx_reconnect() {
    ip -n "$FX_NS-sw" link set "sw-$1" up
    fx_log "$1 reconnected"
}

# fx_partition "A B ..." "C D ...": members of one side silently drop traffic to the other.
fx_partition() {
    local a b
    for a in $1; do
        for b in $2; do
            ip -n "$FX_NS-$a" route add blackhole "${FX_IP[$b]}/32"
            ip -n "$FX_NS-$b" route add blackhole "${FX_IP[$a]}/32"
        done
    done
    FX_PARTS=("$1" "$2")
    fx_log "partitioned: {$1} | {$2}"
}
fx_unpartition() {
    local a b
    for a in ${FX_PARTS[0]}; do
        for b in ${FX_PARTS[1]}; do
            ip -n "$FX_NS-$a" route del blackhole "${FX_IP[$b]}/32" 2>/dev/null
            ip -n "$FX_NS-$b" route del blackhole "${FX_IP[$a]}/32" 2>/dev/null
        done
    done
    fx_log "partition healed"
}

# fx_node_bricks NODE: brick dirs of NODE.
fx_node_bricks() {
    local i node
    for ((i = 0; ; i++)); do
        [[ -d $FX_DIR/bricks/b$i ]] || break
        node=${FX_NODES[i % ${#FX_NODES[@]}]}
        [[ $node == "$1" ]] && echo "$FX_DIR/bricks/b$i"
    done
}

# fx_wipe_node_bricks NODE: the disk was replaced: empty brick directories.
fx_wipe_node_bricks() {
    local d
    for d in $(fx_node_bricks "$1"); do
        find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
        fx_log "wiped brick $d"
    done
}

fx_sleep() {
    fx_log "sleep $1"
    sleep "$1"
}

fx_finish() {
    if ((${#FX_SOFT_FAILS[@]})); then
        fx_fail "${#FX_SOFT_FAILS[@]} checks failed: $(printf '%s; ' "${FX_SOFT_FAILS[@]}")"
    fi
    echo "$FX_TAG: $FX_CHECKS checks passed (seed $FX_SEED)"
}
