# shellcheck shell=bash
# Scenario pnfs (make vm-test SCENARIO=pnfs): pNFS FILES layouts with a kernel client. The
# host runs a 2-node 2 x 2 cluster, an MDS Ganesha whose vol0 export has PNFS = true, and
# a DS Ganesha per node (FSAL_CAIRN in DS mode over that node's cairnd, each on its own
# port; the device lists them as 10.0.2.2:PORT, the host as the guest sees it). A Debian
# 12 guest mounts the MDS with vers=4.1 and vers=4.2, writes and reads back files of
# several sizes (cold cache), and checks that LAYOUTGET and GETDEVICEINFO went to the MDS
# while no READ or WRITE did (pnfs-guest.sh: /proc/self/mountstats against the
# client-wide counts). The host sees the guest's connections on the DS ports and reads the
# same data through FUSE. Guest I/O stays small (TCG).
#
#   flock /work/vm.lock make vm-test SCENARIO=pnfs

# shellcheck source=tests/nfs/lib.sh
. "$VM_REPO/tests/nfs/lib.sh"

PNFS_VM_VERSIONS=${PNFS_VM_VERSIONS:-4.1 4.2}
PNFS_VM_SIZES=${PNFS_VM_SIZES:-4096 200000 1048576 3145728}
declare -A DS_PORT=()

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
    # the guest arrives on the host's loopback through qemu's user-mode network
    nfs_ds_export_block 1 vol0 "$(cl_node_addr "$node")" /vol0 127.0.0.1 >"$dir/ds.conf"
    nfs_render_ds_config "$dir" "${DS_PORT[$node]}" "$dir/ds.conf" "$NFS_PLUGINS"
    nfs_start_ganesha "$dir" "${DS_PORT[$node]}" >>"$VM_DIR/cluster.log" 2>&1 ||
        vm_fail "DS ganesha on $node did not start (log $dir/ganesha.log)"
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

# ds_conns: established TCP connections to the DS ports (the guest's, through slirp)
ds_conns() {
    local n=0 node
    for node in "${!DS_PORT[@]}"; do
        n=$((n + $(ss -Htn state established "( sport = :${DS_PORT[$node]} )" | wc -l)))
    done
    echo "$n"
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
    nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 / RW No_Root_Squash \
        readwrite "n1=10.0.2.2:${DS_PORT[n1]},n2=10.0.2.2:${DS_PORT[n2]}" >"$CL_DIR/exports.conf"
    nfs_gw_start mds "$CL_DIR/exports.conf" >>"$VM_DIR/cluster.log" 2>&1 ||
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
    if command -v tcpdump >/dev/null; then
        tcpdump -i lo -s 512 -U -w "$VM_DIR/pnfs.pcap" \
            "tcp port ${NFS_PORT[mds]} or tcp port ${DS_PORT[n1]} or tcp port ${DS_PORT[n2]}" \
            >"$VM_DIR/tcpdump.log" 2>&1 &
        PNFS_CAPTURE_PID=$!
    fi

    for v in $PNFS_VM_VERSIONS; do
        t0=$SECONDS
        vm_step "NFSv$v with pNFS: write and read back $PNFS_VM_SIZES bytes in the guest"
        out=$(guest run "$v" "${NFS_PORT[mds]}" "${PNFS_VM_SIZES// /,}") || {
            echo "$out" >&2
            guest debug "$v" >"$VM_DIR/guest-debug-$v.log" 2>&1 || true
            cp "$VM_DIR/pnfs.pcap" "$VM_DIR/pnfs.pcap.out" 2>/dev/null || true
            vm_fail "NFSv$v: pNFS I/O in the guest (kernel debug messages: guest-debug-$v.log)"
        }
        echo "$out"
        pass "NFSv$v kernel client: $(grep '^COUNTS' <<<"$out")"
        (($(ds_conns) > 0)) || vm_fail "NFSv$v: no connection to a DS port on the host"
        pass "NFSv$v: the guest holds $(ds_conns) connection(s) to the DS ports"
        for s in $PNFS_VM_SIZES; do
            assert_eq "$(cat "$CL_MNT/pnfs-$v/f$s.md5")" \
                "$(md5sum <"$CL_MNT/pnfs-$v/f$s" | cut -d' ' -f1)" \
                "NFSv$v: f$s written through the DSs reads back the same through FUSE"
        done
        guest umount "$v" || vm_fail "NFSv$v umount"
        vm_step "NFSv$v: done in $((SECONDS - t0)) s"
    done
}
