#!/usr/bin/env bash
# NFSv4 delegations on backend delegations (docs/nfs.md "Delegations"): an NFSv4.1 client
# with a backchannel (tests/nfs/nfs4deleg.py) gets a read delegation for a read open and a
# write delegation for a write open where the export allows them, none where it does not;
# a conflicting access from another gateway, a FUSE mount or an SMB client recalls it,
# waits for the DELEGRETURN and then sees what the holder wrote (also what it flushed on
# the recall); a
# client that never returns it has it revoked after Ganesha's lease time, and the
# conflicting access then completes; a gateway that dies holding one holds nothing.
set -euo pipefail
# shellcheck source=tests/nfs/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LEASE=10
export NFS_LEASE_LIFETIME=$LEASE
nfs_suite_up vol0
{
    nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash readwrite
    nfs_export_block 2 vol0 "$(cl_node_addr n1)" /nodeleg 127.0.0.1 / RW No_Root_Squash none
} >"$CL_DIR/exports.conf"
nfs_gw_start g1 "$CL_DIR/exports.conf"
nfs_gw_start g2 "$CL_DIR/exports.conf"
pass "two ganesha instances over vol0, export /vol0 with delegations, /nodeleg without"

# hold NAME GW PATH MODE [ARGS...]: nfs4deleg.py holding PATH open through GW in the
# background, its output in $CL_DIR/hold-NAME.out; waits until the open is done.
declare -A HOLD_PID=()
hold() {
    local name=$1 gw=$2 path=$3 mode=$4 export=/vol0
    shift 4
    if [[ ${1:-} == --export ]]; then
        export=$2
        shift 2
    fi
    rm -f "$CL_DIR/hold-$name.ready"
    "$NFS_VENV/bin/python" "$CL_REPO/tests/nfs/nfs4deleg.py" --port "${NFS_PORT[$gw]}" \
        --export "$export" hold "$path" "$mode" --ready "$CL_DIR/hold-$name.ready" "$@" \
        >"$CL_DIR/hold-$name.out" 2>&1 &
    HOLD_PID[$name]=$!
    local i
    for ((i = 0; i < 300; i++)); do
        [[ -e $CL_DIR/hold-$name.ready ]] && return 0
        kill -0 "${HOLD_PID[$name]}" 2>/dev/null || break
        sleep 0.1
    done
    cat "$CL_DIR/hold-$name.out" >&2
    fail "nfs4deleg.py $name did not open $path through $gw"
}
hold_out() { cat "$CL_DIR/hold-$1.out"; }
hold_wait() { wait "${HOLD_PID[$1]}" || fail "nfs4deleg.py $1 failed: $(hold_out "$1")"; }
# event NAME WHAT: seconds after the grant at which the holder saw WHAT ("" if never)
event() { awk -v w="$2" '$1 == w { print $2; exit }' "$CL_DIR/hold-$1.out"; }
# timed VAR CMD...: run CMD, its wall time in ms in VAR
timed() {
    local -n _ms=$1
    shift
    local t0
    t0=$(date +%s%N)
    "$@"
    _ms=$((($(date +%s%N) - t0) / 1000000))
}

ms=0
# --- grant -------------------------------------------------------------------------------
nfs_client g1 4.1 write /r1 "read me" || fail "write /r1"
hold grant-r g1 /r1 read --timeout 3
assert_eq "granted read" "$(head -1 "$CL_DIR/hold-grant-r.out")" \
    "an NFSv4.1 read open with a backchannel gets a read delegation"
hold_wait grant-r
hold grant-w g1 /w1 write --timeout 3
assert_eq "granted write" "$(head -1 "$CL_DIR/hold-grant-w.out")" \
    "an NFSv4.1 write open gets a write delegation"
hold_wait grant-w
hold grant-none g1 /r1 read --export /nodeleg --timeout 3
assert_eq "granted none" "$(head -1 "$CL_DIR/hold-grant-none.out")" \
    "an export with Delegations = none grants none"
hold_wait grant-none
# Two gateways: an OPEN through g2 of a file g1's client holds a write delegation of
# recalls it (the open's lookup reads the file's attributes), and once it is returned g2's
# client gets its own (read) delegation.
hold excl-w g1 /x1 write --write "x"
hold excl-r g2 /x1 read --timeout 1
hold_wait excl-w
[[ -n $(event excl-w recalled) && -n $(event excl-w returned) ]] ||
    fail "an OPEN through g2 did not recall g1's write delegation: $(hold_out excl-w)"
assert_eq "granted read" "$(head -1 "$CL_DIR/hold-excl-r.out")" \
    "an OPEN through g2 recalls g1's write delegation, then g2's client gets a read delegation"
hold_wait excl-r

# --- recall from another gateway, returned ----------------------------------------------
nfs_client g1 4.1 write /r2 "old" || fail "write /r2"
hold recall-gw g1 /r2 read
assert_eq "granted read" "$(head -1 "$CL_DIR/hold-recall-gw.out")" "read delegation of /r2 through g1"
timed ms nfs_client g2 4.1 write /r2 "new through g2" || fail "a write through g2 of a delegated file failed"
hold_wait recall-gw
[[ -n $(event recall-gw recalled) ]] || fail "g2's write did not recall g1's read delegation: $(hold_out recall-gw)"
[[ -n $(event recall-gw returned) ]] || fail "the delegation was not returned: $(hold_out recall-gw)"
((ms < LEASE * 1000)) || fail "g2's write took ${ms} ms although the delegation was returned at once"
pass "a write through another gateway recalls a read delegation and completes once it is returned (${ms} ms)"
assert_eq "new through g2" "$(nfs_client g1 4.1 read /r2)" "g1 reads what g2 wrote after the recall"

# Two clients of g1 with read delegations of one file share g1's backend delegation: a
# write through g2 recalls both, and lands once both are returned.
nfs_client g1 4.1 write /r5 "shared" || fail "write /r5"
hold two-a g1 /r5 read
hold two-b g1 /r5 read
assert_eq "granted read,granted read" \
    "$(head -1 "$CL_DIR/hold-two-a.out"),$(head -1 "$CL_DIR/hold-two-b.out")" \
    "two clients of one gateway hold read delegations of one file"
nfs_client g2 4.1 write /r5 "after both" || fail "a write through g2 of a file with two read delegations failed"
hold_wait two-a
hold_wait two-b
[[ -n $(event two-a returned) && -n $(event two-b returned) ]] ||
    fail "both read delegations were not recalled and returned: $(hold_out two-a) / $(hold_out two-b)"
assert_eq "after both" "$(nfs_client g1 4.1 read /r5)" \
    "a write through g2 recalls both read delegations of g1's clients and lands"

# --- write delegation: data written under it is seen after the recall -------------------
hold recall-w g1 /w2 write --write "under the delegation, " --late "flushed on recall"
assert_eq "granted write" "$(head -1 "$CL_DIR/hold-recall-w.out")" "write delegation of /w2 through g1"
got=$(nfs_client g2 4.1 read /w2) || fail "a read through g2 of a write-delegated file failed"
hold_wait recall-w
[[ -n $(event recall-w recalled) && -n $(event recall-w returned) ]] ||
    fail "g2's read did not recall and wait for g1's write delegation: $(hold_out recall-w)"
assert_eq "under the delegation, flushed on recall" "$got" \
    "a read through g2 recalls g1's write delegation and sees what its client wrote and flushed on the recall"

# --- recall from a FUSE mount ------------------------------------------------------------
hold fuse-w g1 /w3 write --write "seen by " --late "the FUSE mount"
got=$(cat "$CL_MNT/w3") || fail "FUSE read of a write-delegated file failed"
hold_wait fuse-w
[[ -n $(event fuse-w recalled) ]] || fail "the FUSE read did not recall the write delegation: $(hold_out fuse-w)"
assert_eq "seen by the FUSE mount" "$got" "a FUSE read recalls a write delegation and sees the client's data"
nfs_client g1 4.1 write /r3 "before" || fail "write /r3"
hold fuse-r g1 /r3 read
timed ms bash -c "printf 'from FUSE' >'$CL_MNT/r3'" || fail "FUSE write of a read-delegated file failed"
hold_wait fuse-r
[[ -n $(event fuse-r recalled) && -n $(event fuse-r returned) ]] ||
    fail "the FUSE write did not recall the read delegation: $(hold_out fuse-r)"
pass "a FUSE write recalls a read delegation and completes once it is returned (${ms} ms)"
assert_eq "from FUSE" "$(nfs_client g1 4.1 read /r3)" "g1 reads what the FUSE mount wrote"

# --- byte-range locks: a client may lock locally under a delegation --------------------
# lockf_hold FILE READY SECONDS: hold a POSIX write lock of FILE through the FUSE mount.
lockf_hold() {
    python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[2], "w").write("locked")
time.sleep(float(sys.argv[3]))' "$@"
}
nfs_client g1 4.1 write /l1 "locked file" || fail "write /l1"
rm -f "$CL_DIR/l1.locked"
lockf_hold "$CL_MNT/l1" "$CL_DIR/l1.locked" 5 &
lock_pid=$!
for ((i = 0; i < 100; i++)); do [[ -e $CL_DIR/l1.locked ]] && break; sleep 0.1; done
[[ -e $CL_DIR/l1.locked ]] || fail "the FUSE mount did not take a lock of /l1"
hold lock-busy g1 /l1 write --timeout 1
assert_eq "granted none" "$(head -1 "$CL_DIR/hold-lock-busy.out")" \
    "no write delegation of a file another client holds a lock of"
hold_wait lock-busy
wait "$lock_pid" || fail "the FUSE lock holder failed"
hold lock-recall g1 /l2 write --write "x"
rm -f "$CL_DIR/l2.locked"
lockf_hold "$CL_MNT/l2" "$CL_DIR/l2.locked" 0 || fail "a FUSE lock of a write-delegated file failed"
hold_wait lock-recall
[[ -n $(event lock-recall recalled) && -n $(event lock-recall returned) ]] ||
    fail "a FUSE lock did not recall the write delegation: $(hold_out lock-recall)"
pass "a lock through the FUSE mount recalls a write delegation first (its client may hold locks locally)"

# --- recall from an SMB client (smbd + vfs_cairn over the same volume) -------------------
# smbd loads this tree's module under a name of its own (as tests/smb/lib.sh does).
SMB_VFS_NAME=cairn_$(printf %s "$CL_REPO" | md5sum | cut -c1-8)
export CAIRN_SMB_VFS_NAME=$SMB_VFS_NAME
# shellcheck source=scripts/smb.sh
. "$CL_REPO/scripts/smb.sh"
make -s -C "$CL_REPO/vfs-module" >&2 || fail "building vfs_cairn (make -C vfs-module)"
[[ -n $(smb_module_path) ]] || fail "vfs_cairn not installed in Samba's module dir"
SMB_DIR=$CL_DIR/smb SMB_PORT=$(free_port) SMB_USER=cairnsmb SMB_PASS=cairn-Test-1
smb_ensure_user "$SMB_USER" || fail "cannot create local user $SMB_USER"
smb_write_conf "$SMB_DIR" "$SMB_PORT"
smb_add_cairn_share "$SMB_DIR" vol0 vol0 "$(cl_node_addr n1)" / "valid users = $SMB_USER root" ||
    fail "cannot add share vol0"
smb_set_password "$SMB_DIR" "$SMB_USER" "$SMB_PASS" || fail "smbpasswd for $SMB_USER"
smb_start "$SMB_DIR" "$CL_DIR/log/smbd.log" || fail "smbd did not start"
trap 'rc=$?; set +e; smb_stop "$SMB_DIR"; nfs_cleanup_all; (exit $rc); cl_cleanup' EXIT
smbc() {
    smbclient //127.0.0.1/vol0 -p "$SMB_PORT" -s "$SMB_DIR/smb.conf" -m SMB3 -t 120 \
        -U "$SMB_USER%$SMB_PASS" -c "$*"
}
chmod 0777 "$CL_MNT"
hold smb-w g1 /s1 write --write "read over " --late "SMB"
smbc "get s1 $CL_DIR/s1.got" >/dev/null || fail "SMB read of a write-delegated file failed"
hold_wait smb-w
[[ -n $(event smb-w recalled) && -n $(event smb-w returned) ]] ||
    fail "the SMB read did not recall the write delegation: $(hold_out smb-w)"
assert_eq "read over SMB" "$(cat "$CL_DIR/s1.got")" \
    "an SMB read recalls a write delegation and sees what the NFS client wrote and flushed"
nfs_client g1 4.1 write /s2 "before" || fail "write /s2"
chmod 0666 "$CL_MNT/s2"
hold smb-r g1 /s2 read
printf 'from SMB' >"$CL_DIR/s2.put"
smbc "put $CL_DIR/s2.put s2" >/dev/null || fail "SMB write of a read-delegated file failed"
hold_wait smb-r
[[ -n $(event smb-r recalled) && -n $(event smb-r returned) ]] ||
    fail "the SMB write did not recall the read delegation: $(hold_out smb-r)"
assert_eq "from SMB" "$(nfs_client g1 4.1 read /s2)" \
    "an SMB write recalls a read delegation, completes once it is returned, and g1 reads it"

# --- a client that never returns: revoked after the lease time --------------------------
nfs_client g1 4.1 write /r4 "kept" || fail "write /r4"
hold revoke g1 /r4 read --on-recall ignore --after 2 --timeout $((LEASE * 6))
timed ms nfs_client g2 4.1 write /r4 "after revocation" || fail "the write waiting for a revocation failed"
hold_wait revoke
[[ -n $(event revoke recalled) ]] || fail "the write did not recall: $(hold_out revoke)"
[[ -z $(event revoke returned) ]] || fail "the holder returned the delegation: $(hold_out revoke)"
[[ -n $(event revoke revoked) ]] ||
    fail "the holder's delegation was not revoked (the write took ${ms} ms): $(hold_out revoke)"
((ms >= LEASE * 1000 - 2000)) || fail "the write completed after ${ms} ms, before the lease time (${LEASE} s): the delegation was not honoured"
((ms < LEASE * 4000)) || fail "the write took ${ms} ms: the revocation came late"
pass "a delegation not returned is revoked after the lease time (${LEASE} s) and the conflicting write then completes (${ms} ms)"
assert_eq "after revocation" "$(nfs_client g1 4.1 read /r4)" "the write that waited for the revocation landed"

# --- a gateway that dies holds nothing ---------------------------------------------------
hold dies g1 /w5 write --write "gone" --on-recall ignore --timeout 60
kill -9 "$(cat "${NFS_DIR[g1]}/ganesha.pid")"
timed ms cat "$CL_MNT/w5" >/dev/null || fail "FUSE read after the holder's gateway died failed"
((ms < 5000)) || fail "a FUSE read waited ${ms} ms for a delegation of a gateway that died"
pass "a gateway killed while holding a write delegation holds nothing: a FUSE read goes on at once (${ms} ms)"
kill "${HOLD_PID[dies]}" 2>/dev/null || true
wait "${HOLD_PID[dies]}" 2>/dev/null || true
finish
