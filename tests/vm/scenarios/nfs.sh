# shellcheck shell=bash
# Scenario nfs (make vm-test SCENARIO=nfs): the kernel NFS client of a Debian 12 guest
# mounts the host's Ganesha (FSAL_CAIRN, vol0 of a 1-node 2x2 cluster on 127.0.0.1) with
# vers=3 (NLM locking through the host's rpcbind and rpc.statd), vers=4.1 and vers=4.2,
# and for each: writes and reads back (cold cache), renames, takes flock and fcntl locks
# (two guest processes conflict). The host then checks what the guest wrote through the
# FUSE mount, changes a file that the guest reads at once (upcall invalidation of Ganesha's
# cache + close-to-open), and locks cross the protocols: a lock held through the FUSE mount
# is refused to the guest and a lock held by the guest is refused through FUSE (locks live
# on the bricks). Guest I/O stays small (TCG).
#
# Run it under the machine's VM lock so only one TCG guest runs at a time:
#   flock /work/vm.lock make vm-test SCENARIO=nfs

# shellcheck source=tests/nfs/lib.sh
. "$VM_REPO/tests/nfs/lib.sh"

NFS_VM_VERSIONS=${NFS_VM_VERSIONS:-3 4.1 4.2}
NFS_HOLDER_PID=

scenario_cleanup() {
    [[ -n ${NFS_HOLDER_PID:-} ]] && kill "$NFS_HOLDER_PID" 2>/dev/null
    nfs_cleanup_all || true
    [[ -n ${CL_DIR:-} ]] || return 0
    cl_stop_all || return 1
    [[ ${VM_KEEP:-} == 1 ]] || rm -rf "$CL_DIR"
}

# host_lock_try PATH START LEN: a non-blocking fcntl write lock through the FUSE mount;
# prints granted or denied.
host_lock_try() {
    python3 - "$@" <<'PY'
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))
    print("granted")
except OSError as e:
    print("denied" if e.errno in (errno.EAGAIN, errno.EACCES) else f"error {e}")
PY
}

# host_lock_hold PATH START LEN: hold a write lock through FUSE in the background
# (NFS_HOLDER_PID) until host_lock_release.
host_lock_hold() {
    local ready=$VM_DIR/host-lock.ready
    rm -f "$ready"
    python3 - "$@" "$ready" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))
open(sys.argv[4], "w").write("held")
time.sleep(600)
PY
    NFS_HOLDER_PID=$!
    wait_until 10 test -s "$ready" || vm_fail "the host could not lock $1 through FUSE"
}

# guest ARGS...: run nfs-guest.sh in the guest. ssh exits 255 when it cannot connect (the
# harness' 5 s ConnectTimeout hits on a loaded host before the command ran): retry those.
guest() {
    local i rc
    for i in 1 2 3 4 5 6; do
        rc=0
        vm_ssh c1 bash /root/nfs-guest.sh "$@" || rc=$?
        ((rc == 255)) || return "$rc"
        vm_step "ssh to c1 failed to connect (try $i); retrying"
        sleep 5
    done
    return "$rc"
}

host_lock_release() {
    kill "$NFS_HOLDER_PID"
    wait "$NFS_HOLDER_PID" 2>/dev/null || true
    NFS_HOLDER_PID=
}

scenario_main() {
    local here=$VM_REPO/tests/vm/scenarios v g out want t0
    command -v ganesha.nfsd >/dev/null || vm_fail "nfs-ganesha missing (apt-get install nfs-ganesha)"
    command -v rpc.statd >/dev/null || vm_fail "rpc.statd missing (apt-get install nfs-common)"
    vm_image

    vm_step "building FSAL_CAIRN"
    make -s -C "$VM_REPO/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >"$VM_DIR/make.log" 2>&1 ||
        vm_fail "building fsal/ (log $VM_DIR/make.log)"

    vm_step "starting the host cluster (1 cairnd, vol0 2x2) and Ganesha"
    cluster_up 1 vol0 2 4 >"$VM_DIR/cluster.log" 2>&1
    trap vm_cleanup EXIT # lib.sh's cluster trap replaced ours: ours stops both
    # the guest arrives on the host's loopback through qemu's user-mode network
    nfs_export_block 1 vol0 "$(cl_node_addr n1)" /vol0 127.0.0.1 >"$CL_DIR/exports.conf"
    nfs_gw_start g1 "$CL_DIR/exports.conf" >>"$VM_DIR/cluster.log" 2>&1 ||
        vm_fail "ganesha did not start (log $CL_DIR/ganesha-g1/ganesha.log)"

    vm_step "ganesha: NFS 127.0.0.1:${NFS_PORT[g1]}, MOUNT ${NFS_MNT_PORT[g1]}, NLM ${NFS_NLM_PORT[g1]}"

    vm_boot c1 --mem 1024
    vm_wait c1
    local tries=0
    until vm_copy_in c1 "$here/nfs-guest.sh" /root/nfs-guest.sh; do
        ((++tries < 6)) || vm_fail "copying nfs-guest.sh"
        sleep 5
    done
    g() { guest "$@"; }

    for v in $NFS_VM_VERSIONS; do
        t0=$SECONDS
        vm_step "NFSv$v: mount, write/read/rename/locks in the guest"
        g mount "$v" "${NFS_PORT[g1]}" "${NFS_MNT_PORT[g1]}" || vm_fail "NFSv$v mount"
        g check "$v" || vm_fail "NFSv$v guest check"
        pass "NFSv$v kernel client: write, cold read back, rename, flock, fcntl ranges"

        # what the guest wrote is on the volume (FUSE mount = another libcairn client)
        [[ $(cat "$CL_MNT/vm-$v/hello.renamed") == "hello from the guest over NFSv$v" ]] ||
            vm_fail "NFSv$v: the guest's file is not on the volume under its new name"
        [[ ! -e $CL_MNT/vm-$v/hello ]] || vm_fail "NFSv$v: the old name survived the rename"
        want=$(cat "$CL_MNT/vm-$v/victim")
        assert_eq "$want" "$(md5sum <"$CL_MNT/vm-$v/blob" | cut -d' ' -f1)" \
            "NFSv$v: 256 KiB written by the guest reads back on the host (FUSE), same md5"

        if [[ $v == 4.2 ]]; then
            g v42ops "$v" || vm_fail "NFSv4.2 operations in the guest"
            python3 - "$CL_MNT/vm-$v/sparse" <<'PY' || vm_fail "NFSv4.2 results not on the volume"
import os, sys
p = sys.argv[1]
assert os.stat(p).st_size == 1 << 20, "size"
with open(p, "rb") as f:
    assert f.read(65536) == b"\xab" * 65536, "data"
    f.seek(512 << 10)
    assert f.read(65536) == bytes(65536), "punched range"
assert os.getxattr(p, "user.cairn") == b"from the guest", "xattr"
PY
            pass "NFSv4.2 ALLOCATE, DEALLOCATE, SEEK and xattrs from the kernel client, seen through FUSE"
        fi

        # a change made on the host is seen by the guest at once
        echo "first" >"$CL_MNT/vm-$v/host-file"
        out=$(g cat "$v" "vm-$v/host-file") || vm_fail "NFSv$v: guest cannot read host-file"
        assert_eq "first" "$out" "NFSv$v: the guest reads a file created on the host"
        echo "second, changed on the host" >"$CL_MNT/vm-$v/host-file"
        out=$(g cat "$v" "vm-$v/host-file")
        assert_eq "second, changed on the host" "$out" "NFSv$v: the guest sees a host change at once"

        # locks cross protocols: FUSE holder vs guest, guest holder vs FUSE
        : >"$CL_MNT/vm-$v/shared-lock"
        host_lock_hold "$CL_MNT/vm-$v/shared-lock" 0 10
        g lock-expect "$v" "vm-$v/shared-lock" 0 10 denied || vm_fail "NFSv$v: FUSE lock not seen by the guest"
        g lock-expect "$v" "vm-$v/shared-lock" 10 10 granted || vm_fail "NFSv$v: disjoint range refused"
        host_lock_release
        g lock-expect "$v" "vm-$v/shared-lock" 0 10 granted || vm_fail "NFSv$v: lock refused after the FUSE holder let go"
        g hold "$v" "vm-$v/shared-lock" 100 10 || vm_fail "NFSv$v: guest cannot hold a lock"
        assert_eq denied "$(host_lock_try "$CL_MNT/vm-$v/shared-lock" 105 1)" \
            "NFSv$v: a lock held by the guest is refused through FUSE"
        g release "$v" || vm_fail "NFSv$v: release"
        assert_eq granted "$(host_lock_try "$CL_MNT/vm-$v/shared-lock" 105 1)" \
            "NFSv$v: granted through FUSE after the guest released"
        pass "NFSv$v: byte-range locks are shared between the kernel NFS client and FUSE"
        g umount "$v" || vm_fail "NFSv$v umount"
        vm_step "NFSv$v: done in $((SECONDS - t0)) s"
    done
}
