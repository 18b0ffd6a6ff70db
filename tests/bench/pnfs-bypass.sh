#!/usr/bin/env bash
# pNFS bypass (issue 24): one client's sequential write and read through a gateway whose
# network link is limited, without pNFS (all data through the gateway) and with pNFS FILES
# layouts (data at the brick node's data server, the gateway sees only OPEN, LAYOUTGET,
# GETDEVICEINFO, LAYOUTCOMMIT, LAYOUTRETURN and CLOSE). Runs alone, not in make bench.
#
#   - a network namespace cairn-pb-PID holds the gateway: the MDS Ganesha (FSAL_CAIRN,
#     NFSv4 only) on NET.2, behind a veth pair shaped with tbf in both directions at
#     BENCH_PNFS_RATE, the way a gateway's NIC limits it. Its FSAL reaches cairnd over the
#     same link (one NIC for clients and the backend: the data crosses it twice without
#     pNFS, as on a real gateway with one network)
#   - cairnd (one node, replica 2 over 2 bricks) and the node's DS Ganesha on NET.1, in the
#     root namespace, with the client (tests/bench/pnfs_bypass.py, a raw NFSv4.1 client,
#     one request at a time): its traffic to the DS does not cross the shaped link
#   - a raw TCP transfer over the link is measured first (the link's real rate)
#
# Prints a table (MiB/s and pnfs/mds) and saves it as
# tests/bench/results/<date>-<host>-pnfs-bypass.md (JSON lines next to it as .jsonl).
# Exit: 0 ok, 77 skipped (not root, no ip/tc), 1 failed. Cleans up on every exit.
#
# Env: CAIRN_BIN_DIR      binaries (default backend/target/release)
#      BENCH_PNFS_RATE    the gateway's link, tc syntax (default 200mbit)
#      BENCH_PNFS_MIB     file size in MiB (default 256)
#      BENCH_PNFS_NET     first three octets of the /30 (default 10.214.0)
#      BENCH_SAVE=0       do not save the table
set -uo pipefail

# shellcheck source=tests/bench/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
: "${BENCH_PNFS_RATE:=200mbit}" "${BENCH_PNFS_MIB:=256}" "${BENCH_PNFS_NET:=10.214.0}" "${BENCH_SAVE:=1}"
BENCH_RESULTS=${BENCH_RESULTS:-$bench_dir/results}
HOST_ADDR=$BENCH_PNFS_NET.1 # root end: cairnd, the DS, the client
GW_ADDR=$BENCH_PNFS_NET.2   # gateway end, in the namespace: the MDS
NS=cairn-pb-$$
VR=cpb$$r
VG=cpb$$g
NS_CREATED=0
VETH_CREATED=0
MDS_PID=
export CL_HOST=$HOST_ADDR

# shellcheck source=tests/nfs/lib.sh
. "$repo/tests/nfs/lib.sh"
CAIRN_LOG_TAG=bench-pnfs-bypass

[[ $(id -u) == 0 ]] || skip "network namespaces and tc need root"
for c in ip tc nsenter ganesha.nfsd; do
    command -v "$c" >/dev/null || skip "$c is not installed"
done
[[ $BENCH_PNFS_RATE =~ ^[0-9]+[kmg]bit$ ]] || { echo "BENCH_PNFS_RATE looks like 200mbit, not '$BENCH_PNFS_RATE'" >&2; exit 2; }
ip -br addr | grep -qF " $HOST_ADDR/" && skip "$HOST_ADDR is already configured here: set BENCH_PNFS_NET"
make -s -C "$repo/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >/dev/null || fail "building fsal/ against $CAIRN_BIN_DIR failed"

net_down() {
    ((VETH_CREATED)) && ip link del "$VR" 2>/dev/null
    ((NS_CREATED)) && ip netns del "$NS" 2>/dev/null
    VETH_CREATED=0 NS_CREATED=0
}
net_up() {
    ip netns add "$NS" || fail "ip netns add $NS"
    NS_CREATED=1
    ip link add "$VR" type veth peer name "$VG" netns "$NS" || fail "ip link add $VR"
    VETH_CREATED=1
    { ip addr add "$HOST_ADDR/30" dev "$VR" && ip link set "$VR" up &&
        ip -n "$NS" addr add "$GW_ADDR/30" dev "$VG" && ip -n "$NS" link set "$VG" up &&
        ip -n "$NS" link set lo up; } || fail "addressing the veth pair $VR / $NS:$VG"
    if ! { tc -n "$NS" qdisc add dev "$VG" root tbf rate "$BENCH_PNFS_RATE" burst 256kb latency 50ms &&
        tc qdisc add dev "$VR" root tbf rate "$BENCH_PNFS_RATE" burst 256kb latency 50ms; }; then
        fail "tc tbf $BENCH_PNFS_RATE on the veth pair"
    fi
}
mds_stop() {
    [[ -n $MDS_PID ]] && stop_pid "$MDS_PID" ganesha.nfsd 20
    MDS_PID=
}

cl_init
trap 'rc=$?; set +e; mds_stop; nfs_cleanup_all; cl_stop_all; net_down; (exit $rc); cl_cleanup' EXIT
net_up
# the link's real rate: a raw TCP transfer gateway -> host (python sockets)
raw=$(python3 - "$HOST_ADDR" "$NS" <<'PY'
import socket, subprocess, sys, time
host, ns = sys.argv[1:3]
s = socket.socket(); s.bind((host, 0)); s.listen(1)
p = subprocess.Popen(["ip", "netns", "exec", ns, "python3", "-c",
    "import socket,sys; c=socket.create_connection((sys.argv[1], int(sys.argv[2])));"
    "b=bytes(1<<20); [c.sendall(b) for _ in range(16)]; c.close()", host, str(s.getsockname()[1])])
c, _ = s.accept(); t = time.monotonic(); n = 0
while k := len(c.recv(1 << 20)):
    n += k
print(f"{n / (time.monotonic() - t) / 1048576:.1f}"); p.wait()
PY
) || fail "raw TCP transfer over the link"
log "link $BENCH_PNFS_RATE: raw TCP $raw MiB/s"

nfs_prereqs
cl_start_etcd
cl_start_node n1
cl_create_volume vol0 2 2
CAIRND=$(cl_node_addr n1)

# the brick node's DS (root namespace, on NET.1)
DS_PORT=$(free_port)
DS_DIR=$CL_DIR/ds
mkdir -p "$DS_DIR"
nfs_ds_export_block 1 vol0 "$CAIRND" /vol0 '*' >"$DS_DIR/ds.conf"
NFS_BIND_ADDR=0.0.0.0 nfs_render_ds_config "$DS_DIR" "$DS_PORT" "$DS_DIR/ds.conf" "$NFS_PLUGINS"
NFS_DIR[ds]=$DS_DIR
NFS_GWS+=(ds)
NFS_PRIVATE_BUS=1 nfs_start_ganesha "$DS_DIR" "$DS_PORT" || fail "the DS Ganesha did not start"

# the gateway's MDS (in the namespace: NFSv4 only, no rpcbind there)
MDS_PORT=$(free_port)
MDS_DIR=$CL_DIR/mds
mkdir -p "$MDS_DIR"
nfs_export_block 1 vol0 "$CAIRND" /vol0 '*' / RW No_Root_Squash none "n1=$HOST_ADDR:$DS_PORT" \
    >"$MDS_DIR/exports.conf"
nfs_export_block 2 vol0 "$CAIRND" /vol0np '*' >>"$MDS_DIR/exports.conf"
NFS_BIND_ADDR=0.0.0.0 nfs_render_config "$MDS_DIR" "$MDS_PORT" "$(free_port)" "$(free_port)" \
    "$MDS_DIR/exports.conf" true "$NFS_PLUGINS"
sed -i 's/^    Protocols = 3, 4;$/    Protocols = 4;/' "$MDS_DIR/ganesha.conf"
ip netns exec "$NS" setsid ganesha.nfsd -F -f "$MDS_DIR/ganesha.conf" -L "$MDS_DIR/ganesha.log" \
    -p "$MDS_DIR/ganesha.pid" -N NIV_EVENT </dev/null >>"$MDS_DIR/ganesha.out" 2>&1 &
MDS_PID=$!
wait_port_pid "$GW_ADDR" "$MDS_PORT" "$MDS_PID" 60 ||
    { tail -n 20 "$MDS_DIR/ganesha.log" >&2; fail "the MDS Ganesha does not listen on $GW_ADDR:$MDS_PORT"; }
log "MDS on $GW_ADDR:$MDS_PORT (behind $BENCH_PNFS_RATE), DS on $HOST_ADDR:$DS_PORT, cairnd $CAIRND"

RAW=$CL_DIR/pnfs-bypass.jsonl
: >"$RAW"
for mode in mds pnfs; do
    export_path=/vol0np
    [[ $mode == pnfs ]] && export_path=/vol0
    out=$(python3 "$repo/tests/bench/pnfs_bypass.py" --host "$GW_ADDR" --port "$MDS_PORT" \
        --export "$export_path" --mode "$mode" --mib "$BENCH_PNFS_MIB") || fail "$mode run: $out"
    echo "$out" >>"$RAW"
    log "$mode: $out"
done

table=$(python3 - "$RAW" "$BENCH_PNFS_RATE" "$raw" "$BENCH_PNFS_MIB" <<'PY'
import json, sys
rows = {r["mode"]: r for r in map(json.loads, open(sys.argv[1]))}
m, p = rows["mds"], rows["pnfs"]
print(f"Gateway link {sys.argv[2]} (raw TCP {sys.argv[3]} MiB/s); one client, {sys.argv[4]} MiB "
      f"sequential, {m['chunk_kib']} KiB requests, one at a time\n")
print("| path | write MiB/s | read MiB/s |")
print("| --- | --- | --- |")
print(f"| through the gateway (no pNFS) | {m['write_mibs']} | {m['read_mibs']} |")
print(f"| pNFS FILES (data at the DS) | {p['write_mibs']} | {p['read_mibs']} |")
print(f"| **pnfs / gateway** | **{p['write_mibs'] / m['write_mibs']:.2f}** | "
      f"**{p['read_mibs'] / m['read_mibs']:.2f}** |")
PY
) || fail "making the table"
echo "$table"
if [[ $BENCH_SAVE == 1 ]]; then
    base=$(bench_result_base "$BENCH_RESULTS/$(date -u +%Y-%m-%d)-$(hostname -s)-pnfs-bypass")
    {
        echo "# pNFS bypass, $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname -s), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
        echo
        echo "tests/bench/pnfs-bypass.sh; binaries: $CAIRN_BIN_DIR"
        echo
        echo "$table"
    } >"$base.md"
    cp "$RAW" "$base.jsonl"
    log "saved $base.md"
fi
finish
