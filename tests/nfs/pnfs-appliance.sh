#!/usr/bin/env bash
# pNFS: a brick node's data server as the appliance runs it (docs/nfs.md "pNFS",
# docs/appliance.md). The files first boot and `cairn-appliance setup-ds` write
# (firstboot.ds_files: the DS's ganesha.conf, its private bus's config, the units' env with
# the node's own certificate) under a scratch root, and the commands of the three units
# (appliance/systemd/cairn-nfs-ds{-bus,,-sync}.service) run with those paths: dbus-daemon,
# ganesha.nfsd and `cairn nfs sync --watch --ds`. Then, on a gateway (an MDS Ganesha with
# `cairn nfs` applying its exports):
#  1. `cairn nfs export add ... --pnfs` without --ds-addrs: the DS sync gives the DS that
#     export (its log: "DS 1 serves volume vol0");
#  2. a FILES layout's device names the node's cairnd host at port 20490 (FSAL_CAIRN's
#     default, the appliance's DS port), and a client writes and reads a file there; the
#     data is the same through FUSE;
#  3. a second export (--pnfs flexfiles) reaches the DS while the sync runs, and its
#     Flexible Files layout names the same DS; a removed export leaves the DS.
# The node's cairnd listens on an address of its own in 127.0.0.0/8 (CL_HOST), so that
# the DS can take the fixed port 20490 there. About 30-60 s.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DS_PORT=20490
# a 127.0.0.0/8 address whose port 20490 is free (make up's DS takes 127.0.0.1:20490)
for _ in 1 2 3 4 5 6 7 8; do
    CL_HOST=127.0.$((RANDOM % 200 + 20)).$((RANDOM % 200 + 20))
    (exec 3<>"/dev/tcp/$CL_HOST/$DS_PORT") 2>/dev/null || break
done
export NFS_PRIVATE_BUS=1
nfs_prereqs
cluster_up 1 vol0 2 2
# the appliance's root: short, the bus socket's path must fit in a sockaddr_un
ROOT=$(mktemp -d /tmp/cairn-ds.XXXXXX)
DS_PIDS=()
ds_cleanup() {
    local p
    for p in "${DS_PIDS[@]}"; do
        stop_pid "$p" "" 20 || true
    done
    cp -a "$ROOT" "$CL_DIR/appliance" 2>/dev/null
    rm -rf "$ROOT"
}
trap 'rc=$?; set +e; ds_cleanup; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT

# what first boot writes (with this address for 0.0.0.0, and the FSAL build of this tree)
mkdir -p "$ROOT/var/lib/cairn/node"
[[ -f $CL_DIR/state/n1/node.pem ]] || fail "n1 has no node certificate in $CL_DIR/state/n1"
cp "$CL_DIR/state/n1/node.pem" "$ROOT/var/lib/cairn/node/node.pem"
CAIRN_APPLIANCE_ROOT=$ROOT CAIRN_APPLIANCE_LIBEXEC=$CL_REPO /usr/bin/python3 -c '
import sys
sys.path.insert(0, sys.argv[1])
from cairn_appliance import firstboot
firstboot.ds_files(bind=sys.argv[2], plugins=sys.argv[3])' \
    "$CL_REPO/appliance/lib" "$CL_HOST" "$NFS_PLUGINS" || fail "firstboot.ds_files"
grep -q "NFS_Port = $DS_PORT;" "$ROOT/var/lib/cairn/nfs-ds/ganesha.conf" || fail "the DS config is not on port $DS_PORT"

# unit_cmd UNIT KEY: the unit's KEY= line, with the appliance's paths under $ROOT, the
# cluster's cairnd for 127.0.0.1:7420 and this tree's cairn
unit_cmd() {
    sed -n "s/^$2=//p" "$CL_REPO/appliance/systemd/$1" |
        sed -e "s#/var/lib/cairn/#$ROOT/var/lib/cairn/#g" -e "s#/run/#$ROOT/run/#g" \
            -e "s#/var/log/ganesha/#$ROOT/var/log/ganesha/#g" -e "s#/etc/ganesha/#$ROOT/etc/ganesha/#g" \
            -e "s#/usr/local/bin/cairn #$CAIRN_BIN_DIR/cairn #" -e "s#127.0.0.1:7420#$(cl_node_addr n1)#"
}
# unit_start UNIT: run its ExecStart in the background with its EnvironmentFile and
# Environment (the directories systemd would make exist)
unit_start() {
    local cmd envs
    read -ra cmd <<<"$(unit_cmd "$1" ExecStart)"
    envs=$(unit_cmd "$1" Environment)
    (
        set -a
        # shellcheck source=/dev/null
        . "$ROOT/etc/cairn/nfs-ds.env"
        [[ -z $envs ]] || eval "$envs"
        set +a
        exec setsid "${cmd[@]}" </dev/null >>"$CL_DIR/log/${1%.service}.out" 2>&1
    ) &
    DS_PIDS+=($!)
}
mkdir -p "$ROOT/run/cairn-nfs-ds" "$ROOT/run/ganesha-ds" "$ROOT/var/log/ganesha"
unit_start cairn-nfs-ds-bus.service
wait_until 10 test -S "$ROOT/run/cairn-nfs-ds/dbus.sock" || fail "the DS's bus did not start"
unit_start cairn-nfs-ds.service
DS_LOG=$ROOT/var/log/ganesha/ganesha-ds.log
wait_port_pid "$CL_HOST" "$DS_PORT" "${DS_PIDS[1]}" 60 ||
    { tail -n 20 "$DS_LOG" >&2; fail "the DS Ganesha does not listen on $CL_HOST:$DS_PORT"; }
unit_start cairn-nfs-ds-sync.service
pass "the appliance's DS (bus, Ganesha on $CL_HOST:$DS_PORT, export sync) runs from first boot's files and the units' commands"

# the gateway: an MDS Ganesha whose exports `cairn nfs` applies
MDS=$CL_DIR/ganesha-mds
mkdir -p "$MDS/cairn"
: >"$MDS/cairn/exports.conf"
nfs_gw_start mds "$MDS/cairn/exports.conf"
cn() {
    DBUS_SYSTEM_BUS_ADDRESS=$(nfs_bus_address "$MDS") CAIRN_HOST=$(cl_node_addr n1) \
        "$CAIRN_BIN_DIR/cairn" nfs --conf-dir "$MDS/cairn" "$@"
}
state() { python3 "$CL_REPO/tests/nfs/pnfs_state.py" --port "${NFS_PORT[mds]}" "$@"; }

# 1. a pNFS export without --ds-addrs reaches the DS
out=$(cn export add vol0 --path /vol0 --clients 127.0.0.0/8 --squash no_root_squash \
    --protocols 4 --pnfs 2>&1) || fail "export add --pnfs: $out"
grep -q "added 1" <<<"$out" || fail "the MDS did not add export 1: $out"
wait_until 30 grep -q "CAIRN: DS 1 serves volume vol0" "$DS_LOG" ||
    { cat "$CL_DIR/log/cairn-nfs-ds-sync.out" >&2; fail "the DS sync did not give the DS export 1 within 30 s"; }
grep -q "DS = true;" "$ROOT/etc/ganesha/cairn-ds/exports/export.1.conf" || fail "no DS block for export 1"
pass "cairn nfs export add --pnfs: the DS serves export 1 (cairn nfs sync --watch --ds)"

# 2. the layout names the node's cairnd host at port 20490, and I/O there works
out=$(state --export /vol0 io f1 --size 300000 --out "$CL_DIR/f1.data" 2>&1) || { echo "$out" >&2; fail "I/O at the DS"; }
echo "$out"
grep -qx "ds $CL_HOST:$DS_PORT" <<<"$out" || fail "the layout's device is not $CL_HOST:$DS_PORT"
wait_until 10 cmp -s "$CL_MNT/f1" "$CL_DIR/f1.data" || fail "f1 through FUSE differs from what the client wrote at the DS"
pass "a FILES layout names $CL_HOST:$DS_PORT (the cairnd host, the default DS port); 300000 bytes written there, the same through FUSE"

# 3. a second export while the sync runs; removal
cn export add vol0 --path /vol0ff --clients 127.0.0.0/8 --squash no_root_squash \
    --protocols 4 --pnfs flexfiles >/dev/null || fail "export add --pnfs flexfiles"
wait_until 30 grep -q "CAIRN: DS 2 serves volume vol0" "$DS_LOG" || fail "the DS did not get export 2 within 30 s"
l=$(state --export /vol0ff --flexfiles layout g1 | grep -E '^(layout|error) ') || true
[[ $l == "layout $DS_PORT" ]] || fail "a Flexible Files layout of export 2: '$l' (want the DS on $DS_PORT)"
cn export remove /vol0 >/dev/null || fail "export remove /vol0"
wait_until 30 test ! -e "$ROOT/etc/ganesha/cairn-ds/exports/export.1.conf" || fail "export 1 stayed on the DS"
pass "a Flexible Files export reached the running DS sync (its layout names the DS); a removed export left the DS"

finish
