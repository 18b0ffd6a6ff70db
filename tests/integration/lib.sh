# shellcheck shell=bash
# shellcheck disable=SC2034 # CL_* variables are for the suites that source this
# Cluster harness for integration suites. Source it from a suite:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"      (or ../integration/lib.sh)
#   cluster_up 2 vol0 2 4        # 2 cairnd nodes, volume vol0, replica 2, 4 bricks, mounted
#   echo hi >"$CL_MNT/f" || fail "write through the mount"
#   pass "wrote f"
#   finish
#
# Everything lives in one temp dir ($CL_DIR): etcd data, each node's state dir, bricks,
# mount points and logs. All servers listen on 127.0.0.1 on free ports (cairnd on $CL_HOST
# if set, e.g. an address a network namespace reaches; etcd stays on 127.0.0.1). An EXIT trap
# always unmounts and stops whatever the suite started; the temp dir is removed when the
# suite passed (kept on failure, or with CAIRN_TEST_KEEP=1).
#
# Env: CAIRN_BIN_DIR   dir holding cairnd, cairn, mount-cairn (default backend/target/debug)
#      CAIRN_TEST_TMP  parent of the temp dir (default ${TMPDIR:-/tmp})
#      CAIRN_TEST_KEEP 1: keep the temp dir
#      RUST_LOG        log filter of the daemons (cairnd --log-level; default info)
#      CL_HOST         address cairnd listens on and advertises (default 127.0.0.1)
#      CL_METRICS      1: each cairnd serves Prometheus metrics on a free 127.0.0.1 port
#                      (cl_metric reads them)
#      CL_CAIRND_ARGS  (array) extra arguments for the next cairnd started
#      CL_ETCD_TLS     1 (default): etcd over TLS with client certificates and auth (a CA
#                      per cluster in $CL_DIR/etcd-tls; cairnd authenticates as CN cairn,
#                      allowed keys under /cairn only); 0: plain HTTP
#
# Functions: cluster_up, cl_init, cl_start_etcd, cl_stop_etcd, cl_start_node,
#   cl_stop_node, cl_restart_node, cl_node_addr, cl_peer_probe, cl_create_volume,
#   cl_one_node, cl_mount, cl_umount, cl_stop_all, cl_start_all, cairn_cli, cairn_cli_at,
#   cl_all_up, cl_heal_stats, cl_metric, wait_port, wait_port_pid, wait_mount, wait_until, fail,
#   pass, skip, skip_kernel, assert_eq, finish.
# Variables set: CL_DIR, CL_NODES (names in start order), CL_MNT (last mount), CL_VOLUME.

CL_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/common.sh
. "$CL_REPO/scripts/common.sh"
# shellcheck source=scripts/etcd-tls.sh
. "$CL_REPO/scripts/etcd-tls.sh"

CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$CL_REPO/backend/target/debug}
CAIRN_LOG_TAG=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
export RUST_LOG=${RUST_LOG:-info}
CL_HOST=${CL_HOST:-127.0.0.1}
CL_ETCD_TLS=${CL_ETCD_TLS:-1}

CL_DIR=
CL_NODES=()
CL_MNT=
CL_VOLUME=
CL_ETCD_PORT=
CL_ETCD_PEER_PORT=
CL_ETCD_PID=
CL_CAIRND_ARGS=()
declare -A CL_PORT=()   # node -> cairnd port
declare -A CL_PID=()    # node -> cairnd pid
declare -A CL_METRICS_PORT=() # node -> cairnd metrics port (CL_METRICS=1)
declare -A CL_MOUNTS=() # mount dir -> volume
CL_PASSED=0
CL_FAILED=0

# --- results ------------------------------------------------------------------------------

pass() {
    CL_PASSED=$((CL_PASSED + 1))
    echo "ok - $*"
}

# fail MSG: report, show the daemons' log tails, and end the suite (the trap cleans up).
fail() {
    CL_FAILED=$((CL_FAILED + 1))
    cl_show_logs >&2
    echo "FAIL - $*" >&2
    exit 1
}

# skip REASON: the suite cannot run here for want of a package, tool or privilege (exit 77:
# counted as skipped by tests/run-all.sh, but failed under CI=true or CAIRN_STRICT=1).
skip() {
    echo "SKIP - $*"
    exit 77
}

# skip_kernel WHAT SCENARIO: this kernel truly lacks WHAT (a module, a kernel feature), and
# `make vm-test SCENARIO=SCENARIO` runs the same checks in a guest that has it. The only
# skip that tests/run-all.sh accepts in strict mode (CI).
skip_kernel() {
    [[ -f $CL_REPO/tests/vm/scenarios/$2.sh ]] || fail "skip_kernel: no VM scenario '$2' covers '$1'"
    echo "SKIP-KERNEL: $1 (covered by make vm-test SCENARIO=$2)"
    exit 77
}

# assert_eq EXPECTED ACTUAL WHAT
assert_eq() {
    if [[ $1 == "$2" ]]; then
        pass "$3"
    else
        fail "$3: expected '$1', got '$2'"
    fi
}

# finish: print the suite's count; call it last.
finish() {
    echo "${CAIRN_LOG_TAG}: $CL_PASSED checks passed"
}

cl_show_logs() {
    local f n
    [[ -n $CL_DIR && -d $CL_DIR/log ]] || return 0
    for f in "$CL_DIR"/log/*; do
        [[ -s $f ]] || continue
        n=20
        [[ $f == */etcd.log ]] && n=3
        echo "--- last lines of $f"
        if [[ $f == */mount-* ]]; then
            # Without fuser's multi-line "[Not Implemented] ioctl" warnings.
            grep -vE 'Not Implemented|^    0x|^\), fh: ' "$f" | tail -n "$n" || true
        else
            tail -n "$n" "$f"
        fi
    done
}

# --- setup and teardown -------------------------------------------------------------------

cl_init() {
    [[ -z $CL_DIR ]] || return 0
    local b
    for b in cairnd cairn mount-cairn; do
        [[ -x $CAIRN_BIN_DIR/$b ]] || fail "$CAIRN_BIN_DIR/$b missing: build first (make build-test)"
    done
    command -v etcd >/dev/null || fail "etcd not installed (make deps)"
    [[ -e /dev/fuse ]] || skip "/dev/fuse is missing: no FUSE mounts on this machine"
    CL_DIR=$(mktemp -d "${CAIRN_TEST_TMP:-${TMPDIR:-/tmp}}/cairn-test.XXXXXX")
    mkdir -p "$CL_DIR"/{log,state,bricks,mnt,etcd}
    trap cl_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

cl_cleanup() {
    local rc=$?
    trap - EXIT
    cl_stop_all || rc=1
    if ((rc == 0 || rc == 77)) && [[ ${CAIRN_TEST_KEEP:-} != 1 ]]; then
        rm -rf "$CL_DIR"
    else
        echo "test dir kept: $CL_DIR" >&2
    fi
    exit "$rc"
}

# cl_etcd_url: the client URL of the test etcd.
cl_etcd_url() {
    if [[ $CL_ETCD_TLS == 1 ]]; then echo "https://127.0.0.1:$CL_ETCD_PORT"; else echo "http://127.0.0.1:$CL_ETCD_PORT"; fi
}

cl_etcd_healthy() {
    if [[ $CL_ETCD_TLS == 1 ]]; then
        etcd_tls_healthy "$(cl_etcd_url)" "$CL_DIR/etcd-tls"
    else
        etcd_healthy "$(cl_etcd_url)"
    fi
}

cl_start_etcd() {
    cl_init
    if [[ -n $CL_ETCD_PID ]] && pid_alive "$CL_ETCD_PID" etcd; then
        return 0
    fi
    CL_ETCD_PORT=${CL_ETCD_PORT:-$(free_port)}
    CL_ETCD_PEER_PORT=${CL_ETCD_PEER_PORT:-$(free_port)}
    local scheme=http tls=()
    if [[ $CL_ETCD_TLS == 1 ]]; then
        scheme=https
        etcd_tls_make "$CL_DIR/etcd-tls" || fail "cannot make the etcd certificates"
        mapfile -t tls < <(etcd_tls_server_args "$CL_DIR/etcd-tls")
    fi
    setsid etcd --name cairn-test --data-dir "$CL_DIR/etcd" "${tls[@]}" \
        --listen-client-urls "$scheme://127.0.0.1:$CL_ETCD_PORT" \
        --advertise-client-urls "$scheme://127.0.0.1:$CL_ETCD_PORT" \
        --listen-peer-urls "$scheme://127.0.0.1:$CL_ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "$scheme://127.0.0.1:$CL_ETCD_PEER_PORT" \
        --initial-cluster "cairn-test=$scheme://127.0.0.1:$CL_ETCD_PEER_PORT" \
        </dev/null >>"$CL_DIR/log/etcd.log" 2>&1 &
    CL_ETCD_PID=$!
    wait_until 30 cl_etcd_healthy ||
        fail "etcd on 127.0.0.1:$CL_ETCD_PORT not healthy after 30s"
    if [[ $CL_ETCD_TLS == 1 ]]; then
        etcd_tls_auth "$(cl_etcd_url)" "$CL_DIR/etcd-tls" /cairn ||
            fail "cannot turn etcd auth on (users root and cairn, role cairn)"
    fi
}

cl_stop_etcd() {
    [[ -n $CL_ETCD_PID ]] || return 0
    stop_pid "$CL_ETCD_PID" etcd 10
    wait "$CL_ETCD_PID" 2>/dev/null || true
    CL_ETCD_PID=
}

# cl_start_node NAME: start cairnd for node NAME (same port and state dir on a restart).
cl_start_node() {
    local name=$1
    cl_start_etcd
    if [[ -n ${CL_PID[$name]:-} ]] && pid_alive "${CL_PID[$name]}" cairnd; then
        return 0
    fi
    if [[ -z ${CL_PORT[$name]:-} ]]; then
        CL_PORT[$name]=$(free_port)
        CL_NODES+=("$name")
    fi
    mkdir -p "$CL_DIR/state/$name"
    local metrics=() etcd_tls=()
    # CL_ETCD_CLIENT=NAME: the etcd client certificate NAME.pem instead of the shared one
    [[ $CL_ETCD_TLS != 1 ]] || mapfile -t etcd_tls < <(etcd_tls_cairnd_args "$CL_DIR/etcd-tls" "${CL_ETCD_CLIENT:-cairn}")
    if [[ ${CL_METRICS:-0} == 1 ]]; then
        [[ -n ${CL_METRICS_PORT[$name]:-} ]] || CL_METRICS_PORT[$name]=$(free_port)
        metrics=(--metrics-listen "127.0.0.1:${CL_METRICS_PORT[$name]}")
    fi
    setsid "$CAIRN_BIN_DIR/cairnd" --name "$name" "${metrics[@]}" "${CL_CAIRND_ARGS[@]}" \
        --listen "$CL_HOST:${CL_PORT[$name]}" \
        --etcd "$(cl_etcd_url)" "${etcd_tls[@]}" \
        --state-dir "$CL_DIR/state/$name" \
        --log-file "$CL_DIR/log/cairnd-$name.log" --log-level "$RUST_LOG" \
        </dev/null >>"$CL_DIR/log/cairnd-$name.out" 2>&1 &
    CL_PID[$name]=$!
    wait_port_pid "$CL_HOST" "${CL_PORT[$name]}" "${CL_PID[$name]}" 30 ||
        fail "cairnd $name does not listen on $CL_HOST:${CL_PORT[$name]}"
}

# cl_metric NAME OP [ROLE [SERIES]]: node NAME's counter SERIES (default
# cairn_brick_ops_total) of brick op OP served as ROLE (default client: a client's
# request at its chain head; replica: a forwarded change), 0 when it has none yet.
# Needs CL_METRICS=1 when the node started.
cl_metric() {
    local name=$1 op=$2 role=${3:-client} series=${4:-cairn_brick_ops_total}
    local port=${CL_METRICS_PORT[$name]:-}
    [[ -n $port ]] || fail "cl_metric: node $name serves no metrics (start it with CL_METRICS=1)"
    curl -sf "http://127.0.0.1:$port/metrics" |
        awk -v k="$series{role=\"$role\",op=\"$op\"}" '$1 == k { v = $2 } END { print v + 0 }'
}

# cl_stop_node NAME: SIGTERM, SIGKILL after 10 s.
cl_stop_node() {
    local name=$1 pid=${CL_PID[$1]:-}
    [[ -n $pid ]] || return 0
    stop_pid "$pid" cairnd 10 || return 1
    wait "$pid" 2>/dev/null || true
    CL_PID[$name]=
}

cl_restart_node() {
    cl_stop_node "$1" || fail "could not stop cairnd $1"
    cl_start_node "$1"
}

cl_node_addr() { echo "$CL_HOST:${CL_PORT[$1]:?unknown node $1}"; }

# cairn_cli ARGS: the cairn CLI against the first node; cairn_cli_at NODE ARGS: against NODE.
cairn_cli() { cairn_cli_at "${CL_NODES[0]:?no node started}" "$@"; }
cairn_cli_at() {
    local node=$1
    shift
    "$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr "$node")" "$@"
}

# cl_peer_probe NODE: add NODE to the first node's cluster with a fresh join token.
cl_peer_probe() {
    local token
    token=$(cairn_cli peer token create --ttl 10m 2>/dev/null) || fail "cairn peer token create"
    cairn_cli peer probe "$(cl_node_addr "$1")" --token "$token" || fail "cairn peer probe $1"
}

# cl_create_volume VOL REPLICA NBRICKS: bricks round-robin over the started nodes (so a
# replica set spans distinct nodes when there are at least REPLICA of them), then start it.
cl_create_volume() {
    local vol=$1 replica=$2 n=$3 i node bricks=() force=()
    for ((i = 0; i < n; i++)); do
        node=${CL_NODES[i % ${#CL_NODES[@]}]}
        mkdir -p "$CL_DIR/bricks/$vol-b$i"
        bricks+=("$node:$CL_DIR/bricks/$vol-b$i")
    done
    ((${#CL_NODES[@]} >= replica)) || force=(force)
    cairn_cli volume create "$vol" replica "$replica" "${bricks[@]}" "${force[@]}" ||
        fail "volume create $vol replica $replica ${bricks[*]}"
    cairn_cli volume start "$vol" || fail "volume start $vol"
    CL_VOLUME=$vol
}

# cl_one_node VOL:REPLICA ...: etcd and one node n1 serving every VOL, each over 4 bricks
# with REPLICA and mounted at $CL_DIR/mnt/VOL (the A/B scripts of tests/bench).
cl_one_node() {
    local v
    cl_init
    cl_start_etcd
    cl_start_node n1
    for v in "$@"; do cl_create_volume "${v%%:*}" "${v#*:}" 4; done
    for v in "$@"; do cl_mount "${v%%:*}" "$CL_DIR/mnt/${v%%:*}"; done
}

# cl_mount VOL [DIR] [NODE]: mount VOL with mount-cairn through NODE (default the first);
# sets CL_MNT to the mount dir. CL_MOUNT_OPTS: more `-o` options (comma-separated).
cl_mount() {
    local vol=$1 dir=${2:-$CL_DIR/mnt/$1} node=${3:-${CL_NODES[0]}}
    mkdir -p "$dir"
    # The mount's own log (its warnings: each failed op with its errno) goes beside the
    # daemons' logs, so a failing suite shows it (cl_show_logs), not to /var/log/cairn.
    setsid "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr "$node"):/$vol" "$dir" \
        -o "log_file=$CL_DIR/log/mount-$vol-${dir##*/}.log${CL_MOUNT_OPTS:+,$CL_MOUNT_OPTS}" \
        </dev/null >>"$CL_DIR/log/mount-$vol.log" 2>&1 &
    CL_MOUNTS[$dir]=$vol
    wait_mount "$dir" $! 30 || fail "mount of $vol at $dir through node $node failed"
    CL_MNT=$dir
}

# cl_umount DIR: unmount and wait for the FUSE daemon to exit.
cl_umount() {
    unmount_fuse "$1" || fail "could not unmount $1"
}

# cl_stop_all: `make down` for the test cluster: unmount, stop nodes, stop etcd. The
# cluster's settings stay, so cl_start_all brings the same cluster back on the same ports.
cl_stop_all() {
    local dir node rc=0
    for dir in "${!CL_MOUNTS[@]}"; do
        unmount_fuse "$dir" || rc=1
    done
    for node in "${CL_NODES[@]}"; do
        cl_stop_node "$node" || rc=1
    done
    cl_stop_etcd || rc=1
    return "$rc"
}

# cl_start_all: etcd, every node, and every mount made so far.
cl_start_all() {
    local dir node
    cl_start_etcd
    for node in "${CL_NODES[@]}"; do
        cl_start_node "$node"
    done
    for dir in "${!CL_MOUNTS[@]}"; do
        is_mounted "$dir" || cl_mount "${CL_MOUNTS[$dir]}" "$dir"
    done
}

# cl_all_up VOL: every brick of VOL is up, in the first node's view.
cl_all_up() {
    cairn_cli volume status "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
bricks = [b for v in d["volumes"] for b in v["bricks"]]
sys.exit(0 if bricks and all(b["state"].lower() == "up" for b in bricks) else 1)'
}

# cl_mount_stat MOUNT KEY: one counter (e.g. fuse.lookup, brick.lookup) of the mount's
# trusted.cairn.mount-stats, 0 if absent.
cl_mount_stat() {
    getfattr --only-values -n trusted.cairn.mount-stats "$1" |
        awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }'
}

# cl_heal_stats VOL NODE PY_EXPR: print PY_EXPR evaluated with `b` = the heal statistics
# (JSON) of NODE's brick of VOL.
cl_heal_stats() {
    cairn_cli --json volume heal "$1" statistics | python3 -c '
import json, sys
b = [x for x in json.load(sys.stdin)["bricks"] if x["node"] == sys.argv[1]][0]
print(eval(sys.argv[2]))' "$2" "$3"
}

# cluster_up NODES VOL REPLICA NBRICKS: the usual start: etcd, NODES cairnd (n1, n2, ...)
# joined by peer probe, volume VOL created and started, mounted at $CL_MNT.
cluster_up() {
    local nodes=$1 vol=$2 replica=$3 nbricks=$4 i
    cl_init
    cl_start_etcd
    for ((i = 1; i <= nodes; i++)); do
        cl_start_node "n$i"
    done
    for ((i = 2; i <= nodes; i++)); do
        cl_peer_probe "n$i"
    done
    cl_create_volume "$vol" "$replica" "$nbricks"
    cl_mount "$vol"
}

# bench_result_base BASE: BASE, or BASE-2, BASE-3, ... whichever has no BASE.md yet, so a
# benchmark run never overwrites an earlier run's table of the same day.
bench_result_base() {
    local out=$1 n=2
    while [[ -e $out.md ]]; do out=$1-$((n++)); done
    printf '%s\n' "$out"
}

# bench_save_table BASE TABLE RAW: save TABLE as BASE.md (or BASE-2.md, ... if the day
# already has one) and the raw JSON lines RAW next to it as .jsonl.
bench_save_table() {
    local out
    mkdir -p "$(dirname "$1")"
    out=$(bench_result_base "$1")
    printf '%s\n' "$2" >"$out.md"
    cp "$3" "$out.jsonl"
    log "saved $out.md"
}

# acked_writer DIR ACKED STOP K: until the file STOP exists, create, write and fsync files
# DIR/fK-I (content derived from the name); a file is acknowledged, as the line "K-I I" in
# ACKED, once all three returned. Every error is counted and printed; exits 1 if any.
acked_writer() {
    python3 - "$1" "$2" "$3" "$4" <<'PY'
import os, sys, hashlib
d, acked, stop, k = sys.argv[1:5]
i = errors = 0
with open(acked, "w") as log:
    while not os.path.exists(stop):
        name = f"{k}-{i}"
        data = hashlib.sha256(name.encode()).digest() * (16 + i % 300)
        try:
            fd = os.open(f"{d}/f{name}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            log.write(f"{name} {i}\n")
            log.flush()
        except OSError as e:
            errors += 1
            print(f"write f{name}: {e}", flush=True)
        i += 1
print(f"writer {k}: {i} attempted, {errors} errors", flush=True)
sys.exit(1 if errors else 0)
PY
}
