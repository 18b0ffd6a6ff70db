# shellcheck shell=bash
# Scenario pnfs (make vm-test SCENARIO=pnfs): pNFS FILES and Flexible Files layouts with a
# kernel client. The host runs a 2-node 2 x 2 cluster, an MDS Ganesha whose /vol0 export
# has PNFS = true (FILES) and /vol0ff Layout = flexfiles, and a DS Ganesha per node
# (FSAL_CAIRN in DS mode over that node's cairnd, each on its own port; the devices list
# them as 10.0.2.2:PORT, the host as the guest sees it). A Debian 12 guest mounts /vol0
# with vers=4.1 and vers=4.2 and /vol0ff with vers=4.2 (PNFS_VM_VERSIONS "4.1 4.2 4.2ff":
# a version ending in ff mounts the Flexible Files export), writes and reads back files of
# several sizes (cold cache; pnfs-guest.sh checks GETDEVICEINFO and LAYOUTCOMMIT in
# /proc/self/mountstats). The Ganeshas log their NFSv4 ops (NFS4 at FULL_DEBUG): the MDS
# must have seen LAYOUTGETs and no READ or WRITE, the DSs the READs and WRITEs (the
# client's DS connections close once it returned the layouts: their count proves
# nothing). The host reads the same data through FUSE. Then (PNFS_VM_KILL_DS=1, the
# default), on the last FILES version, the guest writes a file 1 MiB at a time with fsync
# while the host kills the DS that gets its WRITEs: the client goes on through the MDS and
# the whole file reads back the same, in the guest and through FUSE; the killed DS is
# started again (same port) before the next version. The MDS runs with a PNFS_VM_LEASE
# (20 s) lease, and after each kill the scenario waits until three leases have passed and
# checks that the MDS Ganesha still runs: a client record the kill left behind has expired
# by then (Ganesha 4.3 aborted in its reaper there before FSAL_CAIRN made up for its layout
# state reference bug, docs/nfs.md "Layout state (Ganesha 4.3)"). PNFS_VM_KILL_FF=1 does the
# kill on the last Flexible Files version too: off by default, as the Linux 4.2 client then
# resends LAYOUTERROR every 20 s forever (Ganesha 4.3 drops the connection instead of
# answering it; same section). Guest I/O stays small (TCG). About 4-6 minutes.
#
#   flock -o /work/vm.lock make vm-test SCENARIO=pnfs   (-o: no daemon inherits the lock)
#
# On failure the run's logs (build/vm-logs/pnfs.*) hold the Ganeshas' logs, the guest's
# kernel pNFS/RPC debug messages (guest-debug-VERS.log) and a capture of the guest's
# traffic to the MDS and DS ports (pnfs.pcap.out, by tcpdump).

# shellcheck source=tests/nfs/lib.sh
. "$VM_REPO/tests/nfs/lib.sh"

PNFS_VM_VERSIONS=${PNFS_VM_VERSIONS:-4.1 4.2 4.2ff}
PNFS_VM_SIZES=${PNFS_VM_SIZES:-4096 200000 1048576 3145728}
PNFS_VM_KILL_DS=${PNFS_VM_KILL_DS:-1}
PNFS_VM_KILL_FF=${PNFS_VM_KILL_FF:-0}
PNFS_VM_LEASE=${PNFS_VM_LEASE:-20}
PNFS_VM_BIG_MIB=${PNFS_VM_BIG_MIB:-12}
declare -A DS_PORT=()
PNFS_KILLED=

scenario_cleanup() {
    local g
    [[ -z ${PNFS_CAPTURE_PID:-} ]] || kill "$PNFS_CAPTURE_PID" 2>/dev/null || true
    nfs_cleanup_all || true
    [[ -n ${CL_DIR:-} ]] || return 0
    # the Ganeshas' logs (NFS4 and PNFS at FULL_DEBUG) go with the run's logs
    for g in "${NFS_GWS[@]}"; do
        cp "${NFS_DIR[$g]}/ganesha.log" "$VM_DIR/ganesha-$g.log" 2>/dev/null || true
    done
    cl_stop_all || return 1
    [[ ${VM_KEEP:-} == 1 ]] || rm -rf "$CL_DIR"
}

# ds_start NODE: a DS Ganesha for NODE on a free port (DS_PORT[NODE])
ds_start() {
    local node=$1 dir=$CL_DIR/ds-$1
    DS_PORT[$node]=$(free_port)
    NFS_DIR[ds-$node]=$dir
    NFS_GWS+=("ds-$node")
    mkdir -p "$dir"
    # the guest arrives on the host's loopback through qemu's user-mode network; export 1
    # is the MDS's FILES export, 3 its Flexible Files one
    {
        nfs_ds_export_block 1 vol0 "$(cl_node_addr "$node")" /vol0 127.0.0.1
        nfs_ds_export_block 3 vol0 "$(cl_node_addr "$node")" /vol0ff 127.0.0.1
    } >"$dir/ds.conf"
    nfs_render_ds_config "$dir" "${DS_PORT[$node]}" "$dir/ds.conf" "$NFS_PLUGINS"
    nfs_start_ganesha "$dir" "${DS_PORT[$node]}" >>"$VM_DIR/cluster.log" 2>&1 ||
        vm_fail "DS ganesha on $node did not start (log $dir/ganesha.log)"
}

# ds_restart NODE: start NODE's killed DS again on its port (its log so far is kept in
# ganesha.log.old, which ops counts too)
ds_restart() {
    local dir=${NFS_DIR[ds-$1]}
    cat "$dir/ganesha.log" >>"$dir/ganesha.log.old"
    nfs_start_ganesha "$dir" "${DS_PORT[$1]}" >>"$VM_DIR/cluster.log" 2>&1 ||
        vm_fail "restarting the DS ganesha on $1 (log $dir/ganesha.log)"
    vm_step "the DS on $1 runs again on port ${DS_PORT[$1]}"
}

# guest ARGS...: run pnfs-guest.sh in the guest; retry when ssh could not connect (255).
guest() {
    local i rc
    for i in 1 2 3 4 5 6; do
        rc=0
        vm_ssh c1 bash /root/pnfs-guest.sh "$@" || rc=$?
        ((rc == 255)) || return "$rc"
        vm_step "ssh to c1 failed to connect (try $i); retrying"
        sleep 5
    done
    return "$rc"
}

# ops NAME OP: how many OP requests Ganesha instance NAME (mds, ds-n1, ds-n2) has logged
# (its NFS4 component at FULL_DEBUG logs each op of each compound)
ops() {
    local n
    n=$(cat "${NFS_DIR[$1]}"/ganesha.log* 2>/dev/null | grep -c ": opcode [0-9]* is OP_$2\$" || true)
    echo "${n:-0}"
}

# ds_ops OP: OP requests at both DSs
ds_ops() { echo $(($(ops ds-n1 "$1") + $(ops ds-n2 "$1"))); }

# kill_ds_during_write VERS: the guest writes file big 1 MiB at a time with fsync; once
# a DS has taken two of its WRITEs, that DS's Ganesha is killed (SIGKILL). The client
# must go on (Linux marks the device unavailable and sends the I/O through the MDS; the
# MDS notices the dead DS within seconds and recalls the layout, and the next one names
# the other node's DS: fsal/dservers.c) and every acknowledged MiB must be there.
kill_ds_during_write() {
    local v=$1 node hit='' pid t mw0 rc=0
    local -A w0=()
    for node in n1 n2; do w0[$node]=$(ops "ds-$node" WRITE); done
    mw0=$(ops mds WRITE)
    guest big "$v" "$PNFS_VM_BIG_MIB" >"$VM_DIR/big-$v.out" 2>&1 &
    pid=$!
    for ((t = 0; t < 600; t++)); do
        for node in n1 n2; do
            if (($(ops "ds-$node" WRITE) >= w0[$node] + 2)); then
                hit=$node
                break 2
            fi
        done
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if [[ -z $hit ]]; then
        wait "$pid" || true
        cat "$VM_DIR/big-$v.out" >&2
        vm_fail "NFSv$v: the big write sent no WRITE to a DS"
    fi
    kill -9 "$(cat "${NFS_DIR[ds-$hit]}/ganesha.pid.self")" ||
        vm_fail "killing the DS on $hit"
    PNFS_KILLED=$hit
    vm_step "NFSv$v: killed the DS on $hit after $(($(ops "ds-$hit" WRITE) - w0[$hit])) WRITEs of big"
    t=$SECONDS
    wait "$pid" || rc=$?
    cat "$VM_DIR/big-$v.out"
    ((rc == 0)) || {
        guest debug "$v" >"$VM_DIR/guest-debug-big-$v.log" 2>&1 || true
        vm_fail "NFSv$v: writing big while its DS died (guest-debug-big-$v.log)"
    }
    pass "NFSv$v: $PNFS_VM_BIG_MIB MiB written (each MiB fsynced) while the DS on $hit died: finished $((SECONDS - t)) s after the kill, $(($(ops mds WRITE) - mw0)) WRITEs went to the MDS, read back the same in the guest"
    assert_eq "$(cat "$CL_MNT/pnfs-$v/big.md5")" \
        "$(md5sum <"$CL_MNT/pnfs-$v/big" | cut -d' ' -f1)" \
        "NFSv$v: big, written while its DS died, reads back the same through FUSE"
    # a client record the kill left behind (a session the client gave up) expires one
    # lease later, in the MDS's reaper
    while ((SECONDS - t < 3 * PNFS_VM_LEASE)); do
        mds_alive "NFSv$v: $((SECONDS - t)) s after the DS kill"
        sleep 2
    done
    mds_alive "NFSv$v: $((SECONDS - t)) s after the DS kill"
    pass "NFSv$v: the MDS Ganesha still runs $((SECONDS - t)) s (3 leases) after the DS kill"
}

# mds_alive WHAT: the MDS Ganesha runs (else the end of its log, and fail)
mds_alive() {
    kill -0 "$(cat "${NFS_DIR[mds]}/ganesha.pid.self")" 2>/dev/null && return 0
    tail -n 20 "${NFS_DIR[mds]}/ganesha.log" >&2
    vm_fail "the MDS Ganesha died: $1"
}

scenario_main() {
    local here=$VM_REPO/tests/vm/scenarios v s out t0
    command -v ganesha.nfsd >/dev/null || vm_fail "nfs-ganesha missing (apt-get install nfs-ganesha)"
    vm_image

    vm_step "building FSAL_CAIRN"
    make -s -C "$VM_REPO/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >"$VM_DIR/make.log" 2>&1 ||
        vm_fail "building fsal/ (log $VM_DIR/make.log)"

    vm_step "starting the host cluster (2 cairnds, vol0 2x2), a DS per node and the MDS"
    # one cluster CA for both nodes and the clients (tests/run-all.sh does the same)
    export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$VM_DIR/ca}
    export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
    mkdir -p "$CAIRN_CA_DIR"
    # Ganesha's NFS4 and PNFS components at FULL_DEBUG (in ganesha-*.log of the run)
    export NFS_LOG_COMPONENTS=${NFS_LOG_COMPONENTS:-NFS4 = FULL_DEBUG; PNFS = FULL_DEBUG;}
    cluster_up 2 vol0 2 4 >"$VM_DIR/cluster.log" 2>&1
    trap vm_cleanup EXIT # lib.sh's cluster trap replaced ours: ours stops both
    ds_start n1
    ds_start n2
    local ds_addrs="n1=10.0.2.2:${DS_PORT[n1]},n2=10.0.2.2:${DS_PORT[n2]}"
    {
        nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash \
            readwrite "$ds_addrs"
        nfs_export_block 3 vol0 "$(cl_node_addr n1)" /vol0ff 127.0.0.1 / RW No_Root_Squash \
            readwrite "$ds_addrs" flexfiles
    } >"$CL_DIR/exports.conf"
    NFS_LEASE_LIFETIME=$PNFS_VM_LEASE nfs_gw_start mds "$CL_DIR/exports.conf" >>"$VM_DIR/cluster.log" 2>&1 ||
        vm_fail "the MDS ganesha did not start (log $CL_DIR/ganesha-mds/ganesha.log)"
    vm_step "MDS 127.0.0.1:${NFS_PORT[mds]}; DS n1 ${DS_PORT[n1]}, n2 ${DS_PORT[n2]}"

    vm_boot c1 --mem 1024
    vm_wait c1
    local tries=0
    until vm_copy_in c1 "$here/pnfs-guest.sh" /root/pnfs-guest.sh; do
        ((++tries < 6)) || vm_fail "copying pnfs-guest.sh"
        sleep 5
    done

    # a capture of the guest's traffic to the MDS and the DSs (headers and the start of
    # each RPC; tcpdump -r, or wireshark, decodes it): kept with the logs on failure
    # (tcpdump is in the Makefile's DEB_PACKAGES)
    tcpdump -i lo -s 512 -U -w "$VM_DIR/pnfs.pcap" \
        "tcp port ${NFS_PORT[mds]} or tcp port ${DS_PORT[n1]} or tcp port ${DS_PORT[n2]}" \
        >"$VM_DIR/tcpdump.log" 2>&1 &
    PNFS_CAPTURE_PID=$!

    # the kill runs on the last FILES version (and the last Flexible Files one with
    # PNFS_VM_KILL_FF=1)
    local kill_on ml0 mr0 mw0 dr0 dw0 what
    # shellcheck disable=SC2086 # the list splits into versions
    kill_on=$(printf '%s\n' $PNFS_VM_VERSIONS | awk '
        /ff$/ { f = $0; next } { n = $0 } END { print n " " (ff ? f : "") }' ff="${PNFS_VM_KILL_FF/#0/}")
    for v in $PNFS_VM_VERSIONS; do
        t0=$SECONDS
        what="NFSv$v (FILES)"
        [[ $v == *ff ]] && what="NFSv${v%ff} (Flexible Files)"
        if [[ -n $PNFS_KILLED ]]; then
            ds_restart "$PNFS_KILLED"
            PNFS_KILLED=
        fi
        ml0=$(ops mds LAYOUTGET) mr0=$(ops mds READ) mw0=$(ops mds WRITE)
        dr0=$(ds_ops READ) dw0=$(ds_ops WRITE)
        vm_step "$what with pNFS: write and read back $PNFS_VM_SIZES bytes in the guest"
        out=$(guest run "$v" "${NFS_PORT[mds]}" "${PNFS_VM_SIZES// /,}") || {
            echo "$out" >&2
            guest debug "$v" >"$VM_DIR/guest-debug-$v.log" 2>&1 || true
            cp "$VM_DIR/pnfs.pcap" "$VM_DIR/pnfs.pcap.out" 2>/dev/null || true
            vm_fail "NFSv$v: pNFS I/O in the guest (kernel debug messages: guest-debug-$v.log)"
        }
        echo "$out"
        pass "NFSv$v kernel client: $(grep '^COUNTS' <<<"$out")"
        # what each server saw (the Ganeshas' op logs)
        local ml=$(($(ops mds LAYOUTGET) - ml0)) mr=$(($(ops mds READ) - mr0))
        local mw=$(($(ops mds WRITE) - mw0)) dr=$(($(ds_ops READ) - dr0))
        local dw=$(($(ds_ops WRITE) - dw0))
        ((ml > 0)) || vm_fail "NFSv$v: the MDS saw no LAYOUTGET"
        ((mr == 0 && mw == 0)) || vm_fail "NFSv$v: $mr READs and $mw WRITEs went to the MDS"
        ((dr > 0 && dw > 0)) || vm_fail "NFSv$v: the DSs saw $dr READs and $dw WRITEs"
        pass "NFSv$v: the MDS saw $ml LAYOUTGETs and no READ or WRITE; the DSs $dr READs and $dw WRITEs"
        for s in $PNFS_VM_SIZES; do
            assert_eq "$(cat "$CL_MNT/pnfs-$v/f$s.md5")" \
                "$(md5sum <"$CL_MNT/pnfs-$v/f$s" | cut -d' ' -f1)" \
                "NFSv$v: f$s written through the DSs reads back the same through FUSE"
        done
        if [[ $PNFS_VM_KILL_DS == 1 && " $kill_on " == *" $v "* ]]; then
            kill_ds_during_write "$v"
        fi
        guest umount "$v" || vm_fail "NFSv$v umount"
        vm_step "NFSv$v: done in $((SECONDS - t0)) s"
    done
}
