#!/usr/bin/env bash
# pNFS: a data server (DS) Ganesha that dies while its node's cairnd and bricks stay up
# (docs/nfs.md "Recalls"). The volume map does not change; the MDS probes the DSs it
# names in layouts (fsal/dservers.c) and must, within seconds:
#  1. recall the layouts of the files whose sets have a brick on that node (a FILES and a
#     Flexible Files holder get CB_LAYOUTRECALL and return it);
#  2. leave the dead DS out of new layouts: a Flexible Files layout lists the other
#     replica's DS only, a FILES layout whose head's DS died names the other replica's DS
#     (a device of its own);
#  3. when it comes back, recall the layouts handed out meanwhile and name it again;
#  4. with every DS dead, answer LAYOUTGET with NFS4ERR_LAYOUTUNAVAILABLE (FILES and
#     Flexible Files); once they are back, grant layouts again;
#  5. a client's error report (ff_ioerr4 in LAYOUTRETURN) of a DS has it probed at once:
#     a live one stays up (no recall), a dead one's layouts are recalled within seconds on
#     an export whose own probe would take 100 s (DS_Probe_Fails).
# Same cluster as pnfs-state.sh (tests/nfs/lib-pnfs.sh). About 115-140 s (load).
# The raw clients destroy their client IDs, so the MDS stops at once (docs/nfs.md "Layout state").
set -euo pipefail
# shellcheck source=tests/nfs/lib-pnfs.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-pnfs.sh"

# the MDS notices a dead DS after three failed probes a second apart (about 3 s here);
# under load (a python client start takes seconds), allow more
DETECT=30
pnfs_up 10
pass "MDS on port ${NFS_PORT[mds]}, DSs on ${DS_PORT[n1]} (n1) and ${DS_PORT[n2]} (n2)"

# layout_of EXPORT_ARGS... PATH [--iomode M]: pnfs_state.py's `layout` line
layout_of() {
    local out
    out=$(state "$@") || { echo "$out" >&2; fail "layout $*"; }
    grep -E '^(layout|error) ' <<<"$out" | tail -n1
}
# ff_ports IOMODE PATH: the DS ports of a Flexible Files layout, sorted, comma-separated
ff_ports() {
    local l
    l=$(layout_of --export /vol0ff --flexfiles layout "$2" --iomode "$1")
    [[ $l == layout\ * ]] || { echo "$l"; return; }
    tr ',' '\n' <<<"${l#layout }" | sort -n | paste -sd,
}
# ds_logged NODE STATE MIN: the MDS logged NODE's DS as STATE ("does not answer",
# "answers again") at least MIN times (once per PNFS export per change)
ds_logged() {
    local n
    n=$(grep -c "the data server of node $1 (127.0.0.1:${DS_PORT[$1]}) $2" \
        "${NFS_DIR[mds]}/ganesha.log" || true)
    ((n >= $3))
}
# ds_count NODE STATE: how many times so far
ds_count() {
    grep -c "the data server of node $1 (127.0.0.1:${DS_PORT[$1]}) $2" \
        "${NFS_DIR[mds]}/ganesha.log" || true
}
both=$(printf '%s\n' "${DS_PORT[n1]}" "${DS_PORT[n2]}" | sort -n | paste -sd,)

l=$(ff_ports read base-ff)
[[ $l == "$both" ]] || fail "a Flexible Files READ layout with both DSs up names $l (want $both)"
l=$(layout_of --export /vol0 layout base-files)
case $l in
"layout ${DS_PORT[n1]}") H=n1 O=n2 ;;
"layout ${DS_PORT[n2]}") H=n2 O=n1 ;;
*) fail "a FILES layout with both DSs up: '$l' (want one DS)" ;;
esac
pass "both DSs up: a Flexible Files READ layout names both ($both), base-files' FILES layout its head's DS ($H's)"

# 1. the DS of base-files' head (node $H) dies; its cairnd and bricks stay up
hold_layouts dsdown
t0=$SECONDS
ds_kill "$H"
check_recalled dsdown "$H's DS dying"
took=$((SECONDS - t0))
((took <= DETECT)) || fail "the layouts were recalled $took s after $H's DS died (want <= $DETECT s)"
grep -q "the data server of node $H (127.0.0.1:${DS_PORT[$H]}) does not answer" \
    "${NFS_DIR[mds]}/ganesha.log" || fail "the MDS did not log $H's DS as not answering"
pass "$H's DS killed: the FILES and Flexible Files layouts were recalled and returned within $took s"

# 2. new layouts leave $H's DS out
for mode in read rw; do
    l=$(ff_ports $mode down-ff-$mode)
    [[ $l == "${DS_PORT[$O]}" ]] ||
        fail "a Flexible Files $mode layout with $H's DS dead names '$l' (want $O's ${DS_PORT[$O]} only)"
done
for f in base-files down-files-0 down-files-1 down-files-2 down-files-3; do
    l=$(layout_of --export /vol0 layout "$f")
    [[ $l == "layout ${DS_PORT[$O]}" ]] ||
        fail "FILES LAYOUTGET of $f with $H's DS dead: '$l' (want $O's DS ${DS_PORT[$O]})"
done
pass "$H's DS dead: Flexible Files READ and RW layouts and the FILES layouts of base-files (head on $H) and 4 new files name $O's DS only"

# 3. $H's DS comes back: the layouts handed out meanwhile are recalled
hold_layouts dsback
t0=$SECONDS
ds_start "$H"
check_recalled dsback "$H's DS coming back"
took=$((SECONDS - t0))
((took <= DETECT)) || fail "the layouts were recalled $took s after $H's DS came back (want <= $DETECT s)"
grep -q "the data server of node $H (127.0.0.1:${DS_PORT[$H]}) answers again" \
    "${NFS_DIR[mds]}/ganesha.log" || fail "the MDS did not log $H's DS answering again"
l=$(layout_of --export /vol0 layout base-files)
[[ $l == "layout ${DS_PORT[$H]}" ]] || fail "FILES LAYOUTGET of base-files after $H's DS came back: '$l'"
l=$(ff_ports read back-ff)
[[ $l == "$both" ]] || fail "a Flexible Files READ layout after $H's DS came back names $l (want $both)"
pass "$H's DS back: the FILES and Flexible Files layouts granted meanwhile recalled within $took s; base-files' FILES layout and a READ layout name it again"

# 4. every DS dead: no layouts, the clients go through the MDS
n1_before=$(ds_count n1 "does not answer")
n2_before=$(ds_count n2 "does not answer")
ds_kill n1
ds_kill n2
t0=$SECONDS
# both PNFS exports (/vol0, /vol0ff) log each
wait_until $DETECT ds_logged n1 "does not answer" $((n1_before + 2)) ||
    fail "the MDS did not log n1's DS as not answering within $DETECT s"
wait_until $DETECT ds_logged n2 "does not answer" $((n2_before + 2)) ||
    fail "the MDS did not log n2's DS as not answering within $DETECT s"
took=$((SECONDS - t0))
l=$(layout_of --export /vol0ff --flexfiles layout gone-ff --iomode read)
[[ $l == "error NFS4ERR_LAYOUTUNAVAILABLE" ]] || fail "Flexible Files READ LAYOUTGET with both DSs dead: '$l'"
for i in 0 1 2 3; do
    l=$(layout_of --export /vol0 layout "gone-files-$i")
    [[ $l == "error NFS4ERR_LAYOUTUNAVAILABLE" ]] || fail "FILES LAYOUTGET of gone-files-$i with both DSs dead: '$l'"
done
l=$(layout_of --export /vol0ff --flexfiles layout gone-ff-rw)
[[ $l == "error NFS4ERR_LAYOUTUNAVAILABLE" ]] || fail "Flexible Files RW LAYOUTGET with both DSs dead: '$l'"
mds_alive "with both DSs dead"
pass "both DSs dead (noticed within $took s): FILES and Flexible Files LAYOUTGETs answer NFS4ERR_LAYOUTUNAVAILABLE"

n1_before=$(ds_count n1 "answers again")
n2_before=$(ds_count n2 "answers again")
ds_start n1
ds_start n2
t0=$SECONDS
wait_until $DETECT ds_logged n1 "answers again" $((n1_before + 2)) ||
    fail "the MDS did not log n1's DS as answering again within $DETECT s"
wait_until $DETECT ds_logged n2 "answers again" $((n2_before + 2)) ||
    fail "the MDS did not log n2's DS as answering again within $DETECT s"
took=$((SECONDS - t0))
l=$(ff_ports read again-ff)
[[ $l == "$both" ]] || fail "a Flexible Files READ layout after both DSs came back names '$l' (want $both)"
l=$(layout_of --export /vol0 layout again-files)
[[ $l == layout\ * ]] || fail "FILES LAYOUTGET after the DSs came back: '$l'"
mds_alive "after the DSs came back"
pass "both DSs back (noticed within $took s): layouts granted again ($l)"

# 5. a client's error report (an ff_ioerr4 in LAYOUTRETURN) has the MDS probe that DS at
# once, one failure being enough (/vol0slow: its probe alone takes a DS for down only after
# 100 failures, DS_Probe_Fails). A live DS stays up: no recall; a dead one: the layouts of
# /vol0slow are recalled within seconds.
slow_hold() {
    state --export /vol0slow --flexfiles hold "$1" --ready "$CL_DIR/ready-$1" --timeout "$2" \
        >"$CL_DIR/hold-$1.out" 2>&1 &
    SLOW_HOLDER=$!
    wait_until 30 test -s "$CL_DIR/ready-$1" || { cat "$CL_DIR/hold-$1.out" >&2; fail "$1 holder: no layout"; }
}
report_of() {
    local out
    out=$(state --export /vol0slow --flexfiles report "$1") || { echo "$out" >&2; fail "report $1"; }
    sed -n 's/^reported //p' <<<"$out"
}
slow_hold rep-up 8
p=$(report_of rep-up-r)
wait "$SLOW_HOLDER" || true
cat "$CL_DIR/hold-rep-up.out"
grep -q "^no-recall" "$CL_DIR/hold-rep-up.out" || fail "a client's report of the live DS on port $p recalled a layout"
grep -q "a client reports that the data server of brick .* failed WRITE" "${NFS_DIR[mds]}/ganesha.log" ||
    fail "the MDS did not log the client's report"
! grep -q "after a client's error report" "${NFS_DIR[mds]}/ganesha.log" || fail "a live DS was taken for down after a report"
pass "a client's error report of a live DS (port $p): probed, still up, no recall"

l=$(layout_of --export /vol0slow --flexfiles layout rep-down-r --iomode rw)
port=${l#layout }
case $port in
"${DS_PORT[n1]}") Z=n1 ;;
"${DS_PORT[n2]}") Z=n2 ;;
*) fail "a Flexible Files RW layout of /vol0slow: '$l' (want one DS)" ;;
esac
slow_hold rep-down 60
ds_kill "$Z"
t0=$SECONDS
p=$(report_of rep-down-r)
[[ $p == "$port" ]] || fail "the report named the DS on port '$p' (want $Z's $port)"
wait "$SLOW_HOLDER" || true
took=$((SECONDS - t0))
cat "$CL_DIR/hold-rep-down.out"
grep -q "^recalled .* file " "$CL_DIR/hold-rep-down.out" ||
    fail "no CB_LAYOUTRECALL within 60 s of a client's report of $Z's dead DS (/vol0slow probes alone need 100 s)"
grep -q "^returned " "$CL_DIR/hold-rep-down.out" || fail "the recalled layout was not returned"
((took <= 15)) || fail "the layout was recalled $took s after the report (want <= 15 s)"
grep -q "the data server of node $Z (127.0.0.1:$port) does not answer (.*after a client's error report)" \
    "${NFS_DIR[mds]}/ganesha.log" || fail "the MDS did not log $Z's DS down after the report"
mds_alive "after the report of a dead DS"
ds_start "$Z"
pass "a client's error report of $Z's dead DS: /vol0slow's layout recalled and returned $took s after the report (its probe alone: 100 s)"

finish
