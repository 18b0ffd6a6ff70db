#!/usr/bin/env bash
# NFS benchmark (make bench runs it after tests/bench/run.sh; not part of make test): one
# ganesha.nfsd on 127.0.0.1 with three exports, driven over NFSv3 by a libnfs client
# (tests/nfs/nfsbench.c, built here against libnfs-dev) with BENCH_NFS_SESSIONS sessions:
#
#   /dist   FSAL_CAIRN on a 4 x 1 distribute volume (the layout of the Gluster reference)
#   /rep    FSAL_CAIRN on a 2 x 2 replica-2 volume (make up's vol0 layout)
#   /local  FSAL_VFS on a directory of the same disk as the bricks
#
# Workloads: 4 KiB small files in 4-level paths (create = CREATE + WRITE + COMMIT at close,
# stat, read = open + READ + close, delete) and a sequential write (1 MiB WRITEs + COMMIT)
# and cold read (caches dropped) of BENCH_NFS_MIB MiB. Prints a table with the Cairn /
# FSAL_VFS ratios and the Gluster reference of issue 3 (Ganesha 4.3 + FSAL_GLUSTER, 4-brick
# distribute, libnfs NFSv3, 4 sessions, same kind of machine), and saves it as
# tests/bench/results/<date>-<host>-nfs.md (raw lines next to it as .jsonl;
# a later run the same day saves -2, -3, ...).
#
# Env: CAIRN_BIN_DIR (default backend/target/release), BENCH_QUICK=1 (64 MiB, 400 files,
#      not saved unless BENCH_SAVE=1), BENCH_NFS_FILES (4000), BENCH_NFS_MIB (1024),
#      BENCH_NFS_SESSIONS (4), BENCH_TMP (default build/bench-tmp), BENCH_RESULTS.
set -uo pipefail

# shellcheck source=tests/bench/env.sh
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    mode=quick
    : "${BENCH_NFS_FILES:=400}" "${BENCH_NFS_MIB:=64}" "${BENCH_SAVE:=0}"
else
    mode=full
    : "${BENCH_NFS_FILES:=4000}" "${BENCH_NFS_MIB:=1024}" "${BENCH_SAVE:=1}"
fi
: "${BENCH_NFS_SESSIONS:=4}"
BENCH_RESULTS=${BENCH_RESULTS:-$bench_dir/results}

# shellcheck source=tests/nfs/lib.sh
. "$repo/tests/nfs/lib.sh"
CAIRN_LOG_TAG=bench-nfs

command -v ganesha.nfsd >/dev/null || skip "nfs-ganesha is not installed"
[[ -f /usr/include/nfsc/libnfs.h ]] || skip "libnfs-dev is not installed"
[[ $(id -u) == 0 ]] || skip "ganesha.nfsd needs root here"
[[ -f $CAIRN_BIN_DIR/libcairn.so ]] || fail "no libcairn.so in $CAIRN_BIN_DIR (make bench builds it)"
make -s -C "$repo/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >/dev/null || fail "building fsal/ failed"

cl_init
trap 'rc=$?; set +e; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT
NB=$CL_DIR/nfsbench
cc -Wall -Werror -O2 -pthread -o "$NB" "$repo/tests/nfs/nfsbench.c" -lnfs ||
    fail "building tests/nfs/nfsbench.c against libnfs-dev"
started=$SECONDS
cl_start_etcd
cl_start_node n1
cl_create_volume dist 1 4
cl_create_volume rep 2 4
SERVER=$(cl_node_addr n1)
mkdir -p "$CL_DIR/local"
{
    nfs_export_block 1 dist "$SERVER" /dist
    nfs_export_block 2 rep "$SERVER" /rep
    cat <<CONF
EXPORT {
    Export_Id = 3; Path = "$CL_DIR/local"; Pseudo = "/local"; Protocols = 3, 4;
    Transports = TCP; SecType = sys; Access_Type = None; Squash = No_Root_Squash;
    CLIENT { Clients = 127.0.0.1; Access_Type = RW; }
    FSAL { Name = VFS; }
}
CONF
} >"$CL_DIR/exports.conf"
# the FSAL finds libcairn through its runpath (build/fsal/lib, a link that follows the last
# build); pin it to CAIRN_BIN_DIR's for this run
mkdir -p "$CL_DIR/lib"
ln -sf "$CAIRN_BIN_DIR/libcairn.so" "$CL_DIR/lib/libcairn.so.1"
LD_LIBRARY_PATH=$CL_DIR/lib nfs_gw_start g1 "$CL_DIR/exports.conf"
log "cluster and ganesha up in $((SECONDS - started)) s ($mode run, $BENCH_NFS_SESSIONS sessions)"

RAW=$CL_DIR/results.jsonl
: >"$RAW"
url() { echo "nfs://127.0.0.1/$1?nfsport=${NFS_PORT[g1]}&mountport=${NFS_MNT_PORT[g1]}&version=3"; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
# bench TARGET ARGS...: run nfsbench, tag its JSON lines with TARGET
bench() {
    local target=$1 out
    shift
    out=$("$NB" "$@" 2>"$CL_DIR/log/nfsbench.err") || {
        cat "$CL_DIR/log/nfsbench.err" >&2
        fail "nfsbench $* on $target"
    }
    printf '%s\n' "${out//\{/\{\"target\": \"$target\", }" | tee -a "$RAW" >&2
}

for t in local dist rep; do
    log "small files on /$t ($BENCH_NFS_FILES files)"
    bench "$t" small "$(url "$t")" "$BENCH_NFS_FILES" "$BENCH_NFS_SESSIONS"
done
for t in local dist rep; do
    log "sequential $BENCH_NFS_MIB MiB on /$t"
    bench "$t" write "$(url "$t")" "$BENCH_NFS_MIB" "$BENCH_NFS_SESSIONS"
    drop_caches
    bench "$t" read "$(url "$t")" "$BENCH_NFS_MIB" "$BENCH_NFS_SESSIONS"
done

took=$((SECONDS - started))
host=$(hostname -s 2>/dev/null || hostname)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
table=$(python3 - "$RAW" "$mode" "$host" "$commit" "$took" "$BENCH_NFS_FILES" "$BENCH_NFS_MIB" \
    "$BENCH_NFS_SESSIONS" "$(basename "$CAIRN_BIN_DIR")" <<'PY'
import json, sys
raw, mode, host, commit, took, files, mib, sessions, profile = sys.argv[1:]
r = {}
for line in open(raw):
    j = json.loads(line)
    r[(j["target"], j["op"] if j["unit"] == "files/s" else "seq_" + j["op"])] = j["value"]
# issue 3: Ganesha 4.3 + FSAL_GLUSTER, 4-brick distribute, libnfs NFSv3, 4 sessions
gluster = {"create": 754, "stat": 3086, "read": 1420, "delete": 1570,
           "seq_write": 314, "seq_read": 736}
rows = [("create 4 KiB files (files/s)", "create"), ("stat (files/s)", "stat"),
        ("read 4 KiB files (files/s)", "read"), ("delete (files/s)", "delete"),
        (f"write {mib} MiB (MiB/s)", "seq_write"), (f"read {mib} MiB, cold (MiB/s)", "seq_read")]
f = lambda v: "-" if v is None else f"{v:.0f}"
ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}"
print(f"## NFS (NFSv3, libnfs, {sessions} sessions, loopback) - {host}, {commit}, {mode} run, "
      f"{profile} build, {took} s")
print()
print(f"{files} files of 4 KiB in 4-level paths; {mib} MiB sequential in 1 MiB records.")
print("Cairn 4x1 = FSAL_CAIRN on a 4 x 1 distribute volume, 2x2 = on a replica-2 volume;")
print("VFS = Ganesha's FSAL_VFS on the same disk; Gluster = issue 3's reference (FSAL_GLUSTER,")
print("4-brick distribute); target = 3x Gluster for small files; met = Cairn 4x1 >= target.")
print()
print("| workload | Cairn 4x1 | Cairn 2x2 | VFS local | 4x1/VFS | 2x2/VFS | Gluster | 4x1/Gluster | target | met |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|")
for label, op in rows:
    d, p, l = r.get(("dist", op)), r.get(("rep", op)), r.get(("local", op))
    g = gluster[op]
    target = 3 * g if not op.startswith("seq") else None
    met = "-" if target is None or d is None else ("yes" if d >= target else "no")
    print(f"| {label} | {f(d)} | {f(p)} | {f(l)} | {ratio(d, l)} | {ratio(p, l)} | {g} | "
          f"{ratio(d, g)} | {f(target)} | {met} |")
PY
) || fail "building the table from $RAW"
printf '%s\n' "$table"
if [[ $BENCH_SAVE == 1 ]]; then
    bench_save_table "$BENCH_RESULTS/$(date +%Y-%m-%d)-$host-nfs" "$table" "$RAW"
fi
pass "NFS benchmark done in ${took}s"
