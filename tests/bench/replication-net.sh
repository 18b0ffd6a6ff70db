#!/usr/bin/env bash
# Replication over a limited client link (make bench runs it after the main table unless
# BENCH_NETREP=0; it also runs alone). Issue 2's target "replica-2 writes at least 0.9 of a
# distribute volume's" is about a deployment where the client's (gateway's) network link is
# the limit: Cairn replicates by chain (the client sends each byte once, to the head brick,
# which forwards it to the other replica); GlusterFS's AFR has the client send every byte to
# both replicas. On one host both replicas' bricks share the CPU, so the main table's
# 2x2/4x1 ratio measures CPU, not that. Here only the client's sockets sit behind a shaped
# link:
#
#   - a network namespace cairn-nr-PID holds the client end of a veth pair (NET.2/30; the
#     root end is NET.1), shaped with tbf in both directions: BENCH_NETREP_RATE for the
#     sequential writes, BENCH_NETREP_RAND_RATE for the random ones (each low enough that
#     the link, not this host's CPU, is the limit); a raw TCP transfer over it (python
#     sockets) is measured at each rate and printed
#   - one cairnd (all bricks) listens on NET.1; volumes nr-rep (replica 2 over 2 sets) and
#     nr-dist (distribute over 4 bricks); mount-cairn runs in the namespace
#     (nsenter --net, so the mount itself is visible to the root namespace)
#   - GlusterFS (tests/bench/gluster.sh): a private glusterd and its bricks on NET.1,
#     gl-rep (2x2) and gl-dist (4x1), the glusterfs FUSE client in the namespace
#   - the benchmarks (cairn-bench, fio) run in the root namespace on the mount points:
#     sequential write of BENCH_NETREP_MIB MiB in 1 MiB records + fsync (cairn-bench
#     posix-seq; its cold read is not reported), and fio 4 KiB random write at QD 16
#     (libaio, O_DIRECT, end fsync) for BENCH_SECONDS
#   - the bytes the client sent (rx bytes of the root end of the veth, headers and requests
#     included) per byte written: a chain should show ~1, AFR ~2; and the link use (those
#     bytes per second / the link rate): near 100% means the link was the limit
#
# Prints a table and saves it as tests/bench/results/<date>-<host>-netrep.md (raw JSON lines
# next to it as .jsonl; a later run the same day saves -2, -3, ...).
# Exit: 0 ok, 77 skipped (not root, no ip/tc/nsenter, the subnet taken), 1 failed.
# Cleans up (mounts, cairnd, etcd, glusterd and bricks, namespace, veth, qdiscs) on every
# exit; touches no other namespace or process.
#
# Env: CAIRN_BIN_DIR      binaries (default backend/target/release)
#      BENCH_QUICK=1      128 MiB, 5 s random, not saved unless BENCH_SAVE=1
#      BENCH_NETREP_MIB   sequential size in MiB (default 512, quick 128)
#      BENCH_SECONDS      fio random write seconds (default 30, quick 5)
#      BENCH_NETREP_RATE  client link rate of the sequential writes, tc syntax: 100mbit,
#                         500mbit, 1gbit (default 500mbit: far below the ~300+ MiB/s this
#                         host's FUSE client writes over loopback)
#      BENCH_NETREP_RAND_RATE  link rate of the random writes (default 100mbit: ~2900 4 KiB
#                         writes/s, below the ~4000-9000 the mounts do unshaped here)
#      BENCH_NETREP_NET   first three octets of the /30 (default 10.213.0)
#      BENCH_GLUSTER=0    no Gluster columns
#      BENCH_TMP, BENCH_RESULTS, BENCH_SAVE=0|1  as tests/bench/run.sh
set -uo pipefail

# shellcheck source=tests/bench/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    mode=quick
    : "${BENCH_NETREP_MIB:=128}" "${BENCH_SECONDS:=5}" "${BENCH_SAVE:=0}"
else
    mode=full
    : "${BENCH_NETREP_MIB:=512}" "${BENCH_SECONDS:=30}" "${BENCH_SAVE:=1}"
fi
: "${BENCH_NETREP_RATE:=500mbit}" "${BENCH_NETREP_RAND_RATE:=100mbit}" "${BENCH_NETREP_NET:=10.213.0}"
BENCH_RESULTS=${BENCH_RESULTS:-$bench_dir/results}

HOST_ADDR=$BENCH_NETREP_NET.1   # root end: cairnd, glusterd, bricks
CLIENT_ADDR=$BENCH_NETREP_NET.2 # client end, in the namespace
NS=cairn-nr-$$
VR=cnr$$r # veth, root end
VC=cnr$$c # veth, client end
NS_CREATED=0
VETH_CREATED=0
export CL_HOST=$HOST_ADDR

# shellcheck source=tests/integration/lib.sh
. "$repo/tests/integration/lib.sh"
CAIRN_LOG_TAG=bench-netrep

[[ $(id -u) == 0 ]] || skip "network namespaces and tc need root"
for c in ip tc nsenter python3; do
    command -v "$c" >/dev/null || skip "$c is not installed (iproute2, util-linux)"
done
for r in "$BENCH_NETREP_RATE" "$BENCH_NETREP_RAND_RATE"; do
    [[ $r =~ ^[0-9]+[kmg]bit$ ]] ||
        { echo "replication-net.sh: BENCH_NETREP_RATE and BENCH_NETREP_RAND_RATE look like 500mbit, not '$r'" >&2; exit 2; }
done
[[ $BENCH_NETREP_NET =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
    { echo "replication-net.sh: BENCH_NETREP_NET must be three octets (10.213.0), not '$BENCH_NETREP_NET'" >&2; exit 2; }
if ip -br addr | grep -qF " $HOST_ADDR/"; then
    skip "$HOST_ADDR is already configured here (another run of this bench?): set BENCH_NETREP_NET"
fi
BENCH=$CAIRN_BIN_DIR/cairn-bench
[[ -x $BENCH ]] || fail "$BENCH missing: build it (make bench)"
FIO=$(command -v fio || true)
[[ -n $FIO ]] || log "fio not installed: no random-write row (apt-get install fio)"

# --- the shaped client link ---------------------------------------------------------------

net_down() {
    if ((VETH_CREATED)); then
        ip link del "$VR" 2>/dev/null # takes its peer and both qdiscs with it
        VETH_CREATED=0
    fi
    if ((NS_CREATED)); then
        ip netns del "$NS" 2>/dev/null
        NS_CREATED=0
    fi
}

net_up() {
    ip netns add "$NS" || fail "ip netns add $NS"
    NS_CREATED=1
    ip link add "$VR" type veth peer name "$VC" netns "$NS" || fail "ip link add $VR (veth, peer $VC in $NS)"
    VETH_CREATED=1
    if ! { ip addr add "$HOST_ADDR/30" dev "$VR" && ip link set "$VR" up &&
        ip -n "$NS" addr add "$CLIENT_ADDR/30" dev "$VC" && ip -n "$NS" link set "$VC" up &&
        ip -n "$NS" link set lo up; }; then
        fail "addressing the veth pair $VR / $NS:$VC"
    fi
    # tbf in both directions: client -> servers on the client end, servers -> client on
    # the root end. The burst holds a few 64 KiB GSO frames (veth hands tbf whole ones).
    tc -n "$NS" qdisc add dev "$VC" root tbf rate "$BENCH_NETREP_RATE" burst 256kb latency 50ms ||
        fail "tc tbf $BENCH_NETREP_RATE on $NS:$VC"
    tc qdisc add dev "$VR" root tbf rate "$BENCH_NETREP_RATE" burst 256kb latency 50ms ||
        fail "tc tbf $BENCH_NETREP_RATE on $VR"
}

# shape RATE PHASE: set both tbfs to RATE, measure a raw transfer each way, check that the
# shaping holds (raw client->server at most 10% above RATE), record it for PHASE.
shape() {
    local rate=$1 phase=$2 up down mibs
    if ! { tc -n "$NS" qdisc change dev "$VC" root tbf rate "$rate" burst 256kb latency 50ms &&
        tc qdisc change dev "$VR" root tbf rate "$rate" burst 256kb latency 50ms; }; then
        fail "tc qdisc change to tbf $rate on $NS:$VC and $VR"
    fi
    mibs=$(python3 -c '
import re, sys
n, u = re.fullmatch(r"(\d+)([kmg])bit", sys.argv[1]).groups()
print(round(int(n) * {"k": 1e3, "m": 1e6, "g": 1e9}[u] / 8 / 1048576, 2))' "$rate")
    # ~1 s of traffic each way, at least 8 MiB
    local n
    n=$(python3 -c 'import sys; print(max(8, int(float(sys.argv[1]))))' "$mibs")
    up=$(raw_rate up "$n") || fail "raw TCP transfer client -> $HOST_ADDR over $VC failed"
    down=$(raw_rate down "$n") || fail "raw TCP transfer $HOST_ADDR -> client over $VC failed"
    log "link $rate (tbf both ways, $mibs MiB/s): raw TCP client->server $up MiB/s, server->client $down MiB/s"
    python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 1.1 * float(sys.argv[2]))' "$up" "$mibs" ||
        fail "the link is not shaped: raw client->server $up MiB/s at $rate = $mibs MiB/s"
    printf '{"op": "link", "target": "%s", "rate": "%s", "link_mibs": %s, "raw_up": %s, "raw_down": %s}\n' \
        "$phase" "$rate" "$mibs" "$up" "$down" >>"$RAW"
}

# client_sent: bytes the client has sent so far (frames received by the root end).
client_sent() { cat "/sys/class/net/$VR/statistics/rx_bytes"; }

# raw_rate up|down MIB: a plain TCP transfer of MIB MiB over the link (up = client ->
# server), timed at the client from the connect to the server's close; prints MiB/s.
RAW_PY='
import os, socket, sys, time
role, host, d, mib, port_file = sys.argv[1:6]
mib, buf = int(mib), b"\0" * (1 << 20)
if role == "server":
    s = socket.socket()
    s.bind((host, 0))
    s.listen(1)
    s.settimeout(60)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    c, _ = s.accept()
    if d == "up":
        while c.recv(1 << 20):
            pass
    else:
        for _ in range(mib):
            c.sendall(buf)
    c.close()
else:
    c = socket.create_connection((host, int(open(port_file).read())), timeout=60)
    t, got = time.monotonic(), 0
    if d == "up":
        for _ in range(mib):
            c.sendall(buf)
        c.shutdown(socket.SHUT_WR)
        c.recv(1)
        got = mib << 20
    else:
        while k := len(c.recv(1 << 20)):
            got += k
    print(f"{got / (time.monotonic() - t) / 1048576:.1f}")
'
raw_rate() {
    local dir=$1 mib=$2 pf=$CL_DIR/raw-port spid out
    rm -f "$pf"
    python3 -c "$RAW_PY" server "$HOST_ADDR" "$dir" "$mib" "$pf" &
    spid=$!
    wait_until 10 test -s "$pf" || { kill "$spid" 2>/dev/null; return 1; }
    out=$(nsenter --net="/run/netns/$NS" python3 -c "$RAW_PY" client "$HOST_ADDR" "$dir" "$mib" "$pf")
    wait "$spid"
    [[ -n $out ]] && printf '%s\n' "$out"
}

# --- setup ---------------------------------------------------------------------------------

cl_init
trap 'rc=$?; set +e; gl_down; cl_stop_all; net_down; (exit $rc); cl_cleanup' EXIT
# shellcheck source=tests/bench/gluster.sh
BENCH_GLUSTER_ADDR=$HOST_ADDR . "$bench_dir/gluster.sh"
GL_CLIENT_CMD=(nsenter --net="/run/netns/$NS")
RAW=$CL_DIR/results.jsonl
: >"$RAW"
started=$SECONDS
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

net_up
shape "$BENCH_NETREP_RATE" seq_write
cl_start_etcd
cl_start_node n1
cl_create_volume nr-rep 2 4
cl_create_volume nr-dist 1 4

# ns_mount VOL DIR: mount-cairn in the client's namespace (the mount is the root
# namespace's: nsenter enters only the network namespace).
ns_mount() {
    local vol=$1 dir=$2
    mkdir -p "$dir"
    setsid nsenter --net="/run/netns/$NS" "$CAIRN_BIN_DIR/mount-cairn" "$(cl_node_addr n1):/$vol" "$dir" \
        </dev/null >>"$CL_DIR/log/mount-$vol.log" 2>&1 &
    CL_MOUNTS[$dir]=$vol
    wait_mount "$dir" $! 30 || fail "mount of $vol at $dir from namespace $NS failed"
}
ns_mount nr-rep "$CL_DIR/mnt/rep"
ns_mount nr-dist "$CL_DIR/mnt/dist"
TARGETS=(cairn-2x2:"$CL_DIR/mnt/rep" cairn-4x1:"$CL_DIR/mnt/dist")
gluster_note=
if [[ ${BENCH_GLUSTER:-1} == 1 ]]; then
    if gl_up "$CL_DIR/gluster"; then
        TARGETS+=(gluster-2x2:"$GL_REP" gluster-4x1:"$GL_DIST")
    else
        gluster_note="GlusterFS could not be started with its client in the namespace (see the log above)"
        log "$gluster_note"
        gl_down
    fi
else
    gluster_note="BENCH_GLUSTER=0: no Gluster columns"
fi
log "up in $((SECONDS - started)) s ($mode run): cairnd and bricks on $HOST_ADDR, clients in $NS"

# --- measurements ------------------------------------------------------------------------

# seq_write TARGET DIR: cairn-bench posix-seq; the client's bytes are read when its
# seq_write line appears (write + fsync done, before its cold read starts).
seq_write() {
    local target=$1 dir=$2 before after='' line pid
    log "sequential write $BENCH_NETREP_MIB MiB on $target"
    before=$(client_sent)
    exec 3< <("$BENCH" posix-seq --file "$dir/seq.dat" --target "$target" --mib "$BENCH_NETREP_MIB" 2>"$CL_DIR/log/bench.err")
    pid=$!
    while IFS= read -r line <&3; do
        if [[ -z $after && $line == *'"seq_write"'* ]]; then
            after=$(client_sent)
            printf '%s\n' "${line%\}}, \"client_sent\": $((after - before))}" >>"$RAW"
        fi
    done
    exec 3<&-
    if ! wait "$pid" || [[ -z $after ]]; then
        cat "$CL_DIR/log/bench.err" >&2
        return 1
    fi
}

# rand_write TARGET DIR: fio 4 KiB random write QD 16 on the file seq_write left.
rand_write() {
    local target=$1 file=$2/seq.dat before after out direct=1
    [[ -n $FIO ]] || return 0
    log "fio randwrite on $target ($BENCH_SECONDS s)"
    local args=(--name=randwrite --filename="$file" --rw=randwrite --bs=4k --iodepth=16
        --ioengine=libaio --runtime="$BENCH_SECONDS" --time_based --size="${BENCH_NETREP_MIB}M"
        --end_fsync=1 --output-format=json)
    before=$(client_sent)
    if ! out=$("$FIO" "${args[@]}" --direct=1 2>"$CL_DIR/log/fio.err"); then
        log "fio --direct=1 failed on $target ($(head -c 300 "$CL_DIR/log/fio.err")); retrying buffered"
        direct=0
        before=$(client_sent)
        out=$("$FIO" "${args[@]}" --direct=0 2>"$CL_DIR/log/fio.err") || { cat "$CL_DIR/log/fio.err" >&2; return 1; }
    fi
    after=$(client_sent)
    printf '%s' "$out" | python3 -c '
import json, sys
target, direct, sent = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
text = sys.stdin.read()
j = json.loads(text[text.index("{"):])["jobs"][0]
w = j["write"]
print(json.dumps({"op": "rand_write", "target": target, "value": w["iops"], "unit": "IOPS",
    "bytes": w["io_bytes"], "qd": 16, "direct": direct, "seconds": j["job_runtime"] / 1000,
    "lat_ms": w["lat_ns"]["mean"] / 1e6,
    "client_sent": sent}))' "$target" "$direct" "$((after - before))" >>"$RAW"
}

failed=()
for t in "${TARGETS[@]}"; do
    seq_write "${t%%:*}" "${t#*:}" || failed+=("seq ${t%%:*}")
done
if [[ -n $FIO ]]; then
    shape "$BENCH_NETREP_RAND_RATE" rand_write
    for t in "${TARGETS[@]}"; do
        [[ -f ${t#*:}/seq.dat ]] || continue
        rand_write "${t%%:*}" "${t#*:}" || failed+=("randwrite ${t%%:*}")
    done
fi
for t in "${TARGETS[@]}"; do rm -f "${t#*:}/seq.dat"; done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the table ---------------------------------------------------------------------------

took=$((SECONDS - started))
host=$(hostname -s 2>/dev/null || hostname)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
table=$(python3 - "$RAW" "$mode" "$host" "$commit" "$took" "$BENCH_NETREP_MIB" "$BENCH_SECONDS" \
    "$load_before" "$load_after" "$gluster_note" "${failed[*]}" <<'PY'
import json, sys
raw, mode, host, commit, took, mib, secs, load0, load1, gnote, failed = sys.argv[1:]
r = {}
for line in open(raw):
    j = json.loads(line)
    r[(j["target"], j["op"])] = j
link = {k[0]: v for k, v in r.items() if k[1] == "link"}  # phase (op) -> link record
T = ["cairn-2x2", "cairn-4x1", "gluster-2x2", "gluster-4x1"]
rows = [(f"sequential write {mib} MiB, 1 MiB records + fsync (MiB/s)", "seq_write"),
        (f"4 KiB random write, QD 16, {secs} s (IOPS)", "rand_write")]
def val(t, op):
    j = r.get((t, op))
    return None if j is None else j["value"]
def f(v):
    if v is None:
        return "-"
    return f"{v / 1000:.1f}k" if v >= 10000 else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")
def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"
def per_byte(t, op):
    j = r.get((t, op))
    return None if j is None else j["client_sent"] / j["bytes"]
def use(t, op):
    j = r.get((t, op))
    if j is None or op not in link:
        return None
    s = j["bytes"] / (j["value"] * 1048576) if op == "seq_write" else j["seconds"]
    return j["client_sent"] / s / (link[op]["link_mibs"] * 1048576)
def link_cell(op):
    l = link.get(op)
    return "-" if l is None else f"{l['rate']} ({l['raw_up']:.1f} MiB/s)"
print(f"## Replication over a limited client link - {host}, {commit}, {mode} run, {took} s")
print()
print("Only the FUSE client (mount-cairn / glusterfs) is behind the link (veth + tbf at the rate")
print("shown, both ways; raw TCP client->server over it in brackets); one cairnd (or glusterd and")
print("its bricks) serves all bricks from the root namespace; the benchmarks run on the mounts.")
print(f"Load average (1/5/15 min) before: {load0}, after: {load1} (2 CPUs, shared machine).")
if gnote:
    print(f"Gluster: {gnote}.")
print()
print("| workload | link | Cairn 2x2 | Cairn 4x1 | 2x2/4x1 | Gluster 2x2 | Gluster 4x1 | 2x2/4x1 | target | Cairn met |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|:-:|")
for label, op in rows:
    c2, c4, g2, g4 = (val(t, op) for t in T)
    met = "-" if c2 is None or not c4 else ("yes" if c2 / c4 >= 0.9 else "**no**")
    print(f"| {label} | {link_cell(op)} | {f(c2)} | {f(c4)} | {ratio(c2, c4)} | {f(g2)} | {f(g4)} "
          f"| {ratio(g2, g4)} | >= 0.9 | {met} |")
print()
print("Bytes the client sent per byte written (counted at the root end of the veth, headers and")
print("requests included; 1 = each byte crossed the link once), and link use (those bytes per")
print("second / the link rate; near 100% = the link was the limit):")
print()
print("| workload | Cairn 2x2 | Cairn 4x1 | Gluster 2x2 | Gluster 4x1 |")
print("|---|---:|---:|---:|---:|")
for label, op in rows:
    cells = []
    for t in T:
        b, u = per_byte(t, op), use(t, op)
        cells.append("-" if b is None else f"{b:.2f} ({u * 100:.0f}%)")
    print(f"| {label.split(' (')[0]} | " + " | ".join(cells) + " |")
lat = [r.get((t, "rand_write"), {}).get("lat_ms") for t in T]
if any(x is not None for x in lat):
    print("| 4 KiB random write: mean latency (ms) | "
          + " | ".join("-" if x is None else f"{x:.1f}" for x in lat) + " |")
if failed:
    print()
    print(f"FAILED: {failed}")
PY
) || fail "building the table from $RAW"
printf '%s\n' "$table"
if [[ $BENCH_SAVE == 1 ]]; then
    bench_save_table "$BENCH_RESULTS/$(date +%Y-%m-%d)-$host-netrep" "$table" "$RAW"
fi
((${#failed[@]} == 0)) || fail "failed: ${failed[*]}"
pass "replication over a limited client link done in ${took}s"
