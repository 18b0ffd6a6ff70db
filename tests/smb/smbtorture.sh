#!/usr/bin/env bash
# smbtorture (Debian samba-testsuite) against vfs_cairn shares and stock shares on a local
# directory, same smbd, same options, same run. Every test that passes on the stock share
# must pass on vfs_cairn; the exceptions are listed, with a reason each, in
# tests/smb/known-failures.txt. A known failure that starts passing is reported (so the
# list can shrink) but does not fail the suite.
#
# Most of the run time is smbd waiting out oplock/lease break timeouts (35 s, compiled into
# smbd), not CPU. So the suites run in lanes, all at once: lane K uses the share pair
# [stockK] (directory sK of the stock dir) and [volK] (directory /sK of the volume), so no
# two lanes ever touch the same files, and in each lane the stock and the vfs_cairn runs
# go side by side. About 6 minutes here (344 s on 2 shared cores with all seven lanes).
#
# Env: SMB_TORTURE_LANES    lanes, ';'-separated, each a space-separated suite list
#                           (default below)
#      SMB_TORTURE_RESULTS  dir for the per-share results (default $CL_DIR/torture)
set -uo pipefail
# shellcheck source=tests/smb/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
command -v smbtorture >/dev/null || skip "smbtorture not installed (apt-get install samba-testsuite)"

# base.* "basics" (SMB1): the tests of Samba's own samba3 selftest list that exercise
# plain file operations — locks, delete-on-close, unlink, attributes, directories, open
# modes, rename, read/write, trans2 queries, tree connects, sessions, NTCreateX access.
# Left out: the share-mode matrices (deny1/2/3, denydos, ntdeny1/2: 8+ min each on stock
# smbd; createx_sharemodes_file/dir: 4096 open pairs, 20 s on stock, minutes on
# vfs_cairn; share modes are smbd's own bookkeeping in locking.tdb, not the VFS's, and
# base.open and smb2.create cover them), delaywrite (timing), charset/casetable/utable
# (server charset tables, not the file system), bench-*, scan-* and iometer (not
# conformance tests).
BASE_BASICS="base.lock base.delete base.unlink base.attr base.dir1 base.dir2 base.open
    base.rename base.rw1 base.chkpath base.tcon base.mangle base.properties base.openattr
    base.trans2 base.xcopy base.negnowait base.disconnect base.createx_access base.fdpass
    base.vuid base.tcondev base.secleak base.samba3error base.defer_open
    base.maximum_allowed"
# Six lanes of about equal length on vfs_cairn (the slowest: smb2.dir.large-files,
# smb2.dir.many and base.dir2, which create and list 700 to 2000 entries; smb2.lease and
# smb2.oplock, which wait out break timeouts), and a short seventh: smb2.ioctl (all of its
# cases: server-side copy FSCTL_SRV_COPYCHUNK and its resume key, sparse files and
# FSCTL_QUERY_ALLOCATED_RANGES, compression, FSCTL_DUP_EXTENTS, trim, network
# interfaces) and smb2.ioctl-on-stream. smbtorture is always given whole suites, never a
# hand-picked list of cases, so a case added to a suite (or one this list forgot) is
# compared too.
SMB_TORTURE_LANES=${SMB_TORTURE_LANES:-smb2.lease smb2.rename smb2.delete-on-close-perms;
    smb2.oplock smb2.durable-open smb2.durable-v2-open smb2.acls;
    ${BASE_BASICS/base.dir2/};
    base.dir2 smb2.connect smb2.read smb2.rw smb2.create smb2.getinfo smb2.lock smb2.streams;
    smb2.dir.find smb2.dir.fixed smb2.dir.one smb2.dir.modify smb2.dir.sorted
    smb2.dir.file-index smb2.dir.many;
    smb2.dir.large-files;
    smb2.ioctl smb2.ioctl-on-stream}
known=$(dirname "${BASH_SOURCE[0]}")/known-failures.txt

IFS=';' read -r -a lanes <<<"${SMB_TORTURE_LANES//$'\n'/ }"

# One share pair per lane, each on its own directory.
lane_shares() {
    local dir=$1 k
    # base.* speaks SMB1; the smb2.* suites are unaffected.
    sed -i 's/server min protocol = SMB2_02/server min protocol = NT1/' "$dir/smb.conf"
    for k in "${!lanes[@]}"; do
        { mkdir -p "$SMB_STOCK_DIR/s$k" "$CL_MNT/s$k" &&
            chmod 0777 "$SMB_STOCK_DIR/s$k" "$CL_MNT/s$k"; } ||
            fail "preparing the directories of lane $k"
        smb_add_stock_share "$dir" "stock$k" "$SMB_STOCK_DIR/s$k" \
            "valid users = $SMB_USER root"
        smb_add_cairn_share "$dir" "vol$k" vol0 "$(cl_node_addr n1)" "/s$k" \
            "valid users = $SMB_USER root" || fail "cannot add share vol$k"
    done
}
# cairnd's metrics count the server-side copies vfs_cairn hands to the bricks.
CL_METRICS=1
smb_up 1 lane_shares
res=${SMB_TORTURE_RESULTS:-$CL_DIR/torture}
mkdir -p "$res"

# torture KIND LANE SUITE: one suite on share KIND$LANE; "STATUS NAME" lines to $res/KIND.LANE.
torture() {
    local kind=$1 lane=$2 suite=$3
    local out=$res/$kind$lane-$suite.log
    timeout 900 smbtorture "//127.0.0.1/$kind$lane" -s "$SMB_CONF" -p "$SMB_PORT" \
        -U "$SMB_USER%$SMB_PASS" --target=samba3 --fullname \
        --option=torture:sharedelay=100000 --option='client min protocol=NT1' \
        "$suite" >"$out" 2>&1
    # subunit-ish lines: "success: NAME", "failure: NAME [", "error: NAME", "skip: NAME"
    sed -nE 's/^(success|failure|error|skip|xfail|uxsuccess): ([^[]*[^[ ]).*$/\1 \2/p' \
        "$out" >>"$res/$kind.$lane"
    if ! grep -qE '^(success|failure|error|skip|xfail)' "$out"; then
        echo "error $suite(no results: $(tail -n 1 "$out"))" >>"$res/$kind.$lane"
    fi
}

# run_lane KIND LANE: the lane's suites in order, with a progress line per suite.
run_lane() {
    local kind=$1 lane=$2 suite start
    for suite in ${lanes[$lane]}; do
        start=$SECONDS
        torture "$kind" "$lane" "$suite"
        echo "# $kind lane $lane: $suite ${SECONDS}s total, $((SECONDS - start))s for the suite"
    done
}

pids=()
# On an early exit, stop the lanes (and their smbtorture) before the cluster goes away.
stop_lanes() {
    local rc=$? p
    for p in "${pids[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    (exit "$rc")
    smb_cleanup
}
trap stop_lanes EXIT
for k in "${!lanes[@]}"; do
    run_lane stock "$k" &
    pids+=($!)
    run_lane vol "$k" &
    pids+=($!)
done
wait "${pids[@]}"
cat "$res"/stock.* >"$res/stock" 2>/dev/null
cat "$res"/vol.* >"$res/vol0" 2>/dev/null

declare -A st_stock=() st_cairn=() known_reason=()
while read -r s n; do st_stock[$n]=$s; done <"$res/stock"
while read -r s n; do st_cairn[$n]=$s; done <"$res/vol0"
while read -r n reason; do
    [[ -n $n && $n != \#* ]] && known_reason[$n]=$reason
done <"$known"

regress=() fixed=() knownf=()
for n in "${!st_stock[@]}"; do
    [[ ${st_stock[$n]} == success ]] || continue
    if [[ ${st_cairn[$n]:-missing} != success ]]; then
        if [[ -n ${known_reason[$n]:-} ]]; then
            knownf+=("$n")
        else
            regress+=("$n (${st_cairn[$n]:-missing})")
        fi
    fi
done
for n in "${!known_reason[@]}"; do
    [[ ${st_cairn[$n]:-} == success ]] && fixed+=("$n")
done

# A suite that gave no per-case results on the stock share (smbtorture could not connect,
# crashed, or the suite name is wrong) compares nothing, which would read as parity.
nores=$(sed -nE 's/^error (.*)\(no results: .*$/\1/p' "$res/stock")
[[ -z $nores ]] || fail "no smbtorture results on the stock share for: $nores (logs in $res)"

count() { grep -c "^$1 " "$res/$2" || true; }
for share in stock vol0; do
    echo "# $share: $(count success "$share") passed, $(count failure "$share") failed," \
        "$(count error "$share") errors, $(count skip "$share") skipped"
done
((${#knownf[@]} == 0)) || printf '# known failure on vfs_cairn: %s\n' "${knownf[@]}"
((${#fixed[@]} == 0)) || printf '# known failure now passes (shrink the list): %s\n' "${fixed[@]}"
((${#st_cairn[@]} > 0)) || fail "no smbtorture results for vfs_cairn"
# The copy-chunk cases must have been copied by the bricks (Op::CopyRange, counted by the
# chain heads), not by vfs_cairn reading and writing the bytes itself.
if [[ " ${lanes[*]} " == *" smb2.ioctl "* ]]; then
    copies=$(cl_metric n1 copy_range)
    refused=$(cl_metric n1 copy_range client cairn_brick_op_errors_total)
    echo "# server-side copies done by the bricks: $copies ($refused refused)"
    ((copies > 0)) || fail "smb2.ioctl's copy-chunk cases made no copy on the bricks (cairnd op copy_range)"
    ((refused == 0)) || fail "$refused copies refused by the bricks (see the cairnd log in $CL_DIR/log)"
fi
if ((${#regress[@]} > 0)); then
    printf 'passes on stock, not on vfs_cairn: %s\n' "${regress[@]}" >&2
    fail "${#regress[@]} smbtorture tests pass on the stock share but not on vfs_cairn (logs in $res)"
fi
pass "every smbtorture test that passes on the stock share passes on vfs_cairn" \
    "(${#knownf[@]} reviewed known failures)"
finish
