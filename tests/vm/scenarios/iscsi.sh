# shellcheck shell=bash
# Scenario iscsi (make vm-test SCENARIO=iscsi): a guest with LIO + tcmu-runner +
# handler_cairn exports a 64 MiB LUN backed by luns/lun0.img on a 2x2 Cairn volume of the
# host (2 cairnd on 127.0.0.1), and a kernel fileio LUN of the same size on its own disk.
# From the host, libiscsi's iscsi-test-cu runs the same SCSI suites against both, through
# a forwarded 127.0.0.1 port; every test that passes on fileio must pass on user:cairn
# unless iscsi-exceptions.txt lists it with a reason. Skipped tests (which iscsi-test-cu
# counts as passed) are counted separately. Data written over iSCSI is checked in the
# backing file through the FUSE mount, and data written on the volume is read over iSCSI
# (no cache in the gateway).
# Env: ISCSI_SUITES (space-separated iscsi-test-cu names, default below).

# shellcheck source=tests/integration/lib.sh
. "$VM_REPO/tests/integration/lib.sh"

IQN_CAIRN=iqn.2024-01.io.cairn.test:cairn
IQN_FILEIO=iqn.2024-01.io.cairn.test:fileio
ISCSI_SUITES=${ISCSI_SUITES:-SCSI.TestUnitReady SCSI.Inquiry SCSI.ReadCapacity10
SCSI.ReadCapacity16 SCSI.Read10 SCSI.Read16 SCSI.Write10 SCSI.Write16 SCSI.WriteSame10
SCSI.WriteSame16 SCSI.Unmap SCSI.CompareAndWrite SCSI.Verify10 SCSI.Verify16
SCSI.GetLBAStatus SCSI.ModeSense6 SCSI.ReportSupportedOpcodes iSCSI.iSCSIcmdsn}

scenario_cleanup() {
    [[ -n ${CL_DIR:-} ]] || return 0
    cl_stop_all || return 1
    [[ ${VM_KEEP:-} == 1 ]] || rm -rf "$CL_DIR"
}

# iscsi_setup SIZE_MIB: build and stage the handler, start the host cluster with
# luns/lun0.img, boot guest g1 (port 3260 forwarded) and create both targets there with
# LUNs of SIZE_MIB. Sets $port (the host port of the guest's 3260). Shared with
# iscsi-bench.sh.
iscsi_setup() {
    local size_mib=$1 here=$VM_REPO/tests/vm/scenarios share p1 p2 cfg
    vm_image

    vm_step "building handler_cairn.so"
    make -s -C "$VM_REPO/iscsi" TARGET_DIR="$(dirname "$CAIRN_BIN_DIR")" \
        PROFILE="$(basename "$CAIRN_BIN_DIR")" >"$VM_DIR/make.log" 2>&1 ||
        vm_fail "building handler_cairn.so (log $VM_DIR/make.log)"
    share=$VM_DIR/share
    mkdir -p "$share"
    cp "$VM_REPO/build/iscsi/handler_cairn.so" "$here"/iscsi-guest.sh "$here"/iscsi-guest.py \
        "$here"/iscsi-bench-guest.sh "$share/"
    strip --strip-debug -o "$share/libcairn.so.1" "$CAIRN_BIN_DIR/libcairn.so"

    vm_step "starting the host cluster (2 cairnd, volume lunvol 2x2)"
    cluster_up 2 lunvol 2 4 >"$VM_DIR/cluster.log" 2>&1
    trap vm_cleanup EXIT # lib.sh's cluster trap replaced ours: ours stops both
    mkdir -p "$CL_MNT/luns"
    truncate -s "${size_mib}M" "$CL_MNT/luns/lun0.img"
    p1=${CL_PORT[n1]} p2=${CL_PORT[n2]}
    # LIO-safe spelling of lunvol@127.0.0.1:P1,127.0.0.1:P2/... (rtslib refuses ':')
    cfg="lunvol@127.0.0.1~$p1+127.0.0.1~$p2/luns/lun0.img"

    vm_boot g1 --fwd 3260 --share "$share"
    vm_wait g1
    vm_step "guest: LIO, tcmu-runner + handler_cairn, targets $IQN_CAIRN and $IQN_FILEIO"
    vm_ssh g1 "mountpoint -q /mnt/cairn || mount -t 9p -o trans=virtio,version=9p2000.L,ro cairn /mnt/cairn;
        bash /mnt/cairn/iscsi-guest.sh '$cfg' $((size_mib << 20)) $IQN_CAIRN $IQN_FILEIO $p1 $p2" \
        >"$VM_DIR/g1/guest-setup.log" 2>&1 || {
        cat "$VM_DIR/g1/guest-setup.log" >&2
        vm_ssh g1 "journalctl -u tcmu-runner --no-pager; cat /var/log/tcmu-runner.log" \
            >"$VM_DIR/g1/tcmu-runner.log" 2>&1 || true
        vm_fail "guest setup (logs in $VM_DIR/g1)"
    }
    port=$(vm_port g1 3260)
}

scenario_main() {
    local here=$VM_REPO/tests/vm/scenarios port t0 lun iqn s
    command -v iscsi-test-cu >/dev/null || vm_fail "iscsi-test-cu missing (apt-get install libiscsi-bin)"
    command -v qemu-io >/dev/null || vm_fail "qemu-io missing (apt-get install qemu-utils)"
    iscsi_setup 64
    url() { echo "iscsi://127.0.0.1:$port/$1/0"; }

    # --- sizes, provisioning ------------------------------------------------------------
    vm_step "READ CAPACITY and LBP VPD of user:cairn"
    local cap
    cap=$(iscsi-readcapacity16 "$(url "$IQN_CAIRN")" 2>&1) || vm_fail "readcapacity16: $cap"
    grep -q "LOGICAL BLOCK LENGTH IN BYTES:512" <<<"$cap" || vm_fail "block size: $cap"
    grep -q "RETURNED LOGICAL BLOCK ADDRESS:131071" <<<"$cap" || vm_fail "capacity: $cap"
    grep -q "LBPME:1" <<<"$cap" || vm_fail "thin provisioning (LBPME) not reported: $cap"
    pass "READ CAPACITY(16): 131072 x 512 bytes, LBPME=1"

    # --- data path: iSCSI -> volume, volume -> iSCSI ------------------------------------
    vm_step "data written over iSCSI is in the backing file, and back"
    qemu-io -f raw -c "write -P 0xa5 1M 1M" "$(url "$IQN_CAIRN")" >"$VM_DIR/qemu-io.log" 2>&1 ||
        vm_fail "qemu-io write over iSCSI: $(cat "$VM_DIR/qemu-io.log")"
    python3 - "$CL_MNT/luns/lun0.img" <<'PY' || vm_fail "backing file does not hold what iSCSI wrote"
import sys
with open(sys.argv[1], "rb") as f:
    f.seek(1 << 20)
    sys.exit(0 if f.read(1 << 20) == b"\xa5" * (1 << 20) else 1)
PY
    pass "1 MiB written over iSCSI reads back from the volume (FUSE mount)"
    python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(4 << 20); f.write(b"\x5a" * 65536)' \
        "$CL_MNT/luns/lun0.img"
    qemu-io -f raw -c "read -P 0x5a 4M 64k" "$(url "$IQN_CAIRN")" >>"$VM_DIR/qemu-io.log" 2>&1 ||
        vm_fail "data written on the volume does not read back over iSCSI"
    pass "64 KiB written on the volume reads back over iSCSI (no gateway cache)"

    # --- iscsi-test-cu ------------------------------------------------------------------
    t0=$SECONDS
    mkdir -p "$VM_DIR/cu"
    for s in $ISCSI_SUITES; do
        for lun in cairn fileio; do
            [[ $lun == cairn ]] && iqn=$IQN_CAIRN || iqn=$IQN_FILEIO
            vm_step "iscsi-test-cu $s on $lun"
            timeout 600 iscsi-test-cu -d -v --test="$s" "$(url "$iqn")" \
                >"$VM_DIR/cu/$lun-$s.log" 2>&1 || true
        done
    done
    vm_step "iscsi-test-cu: $((SECONDS - t0)) s"
    python3 "$here/iscsi-compare.py" "$VM_DIR/cu" "$here/iscsi-exceptions.txt" |
        tee "$VM_DIR/compare.txt"
    [[ ${PIPESTATUS[0]} == 0 ]] || vm_fail "user:cairn fails tests that pass on fileio (see above)"
    pass "every iscsi-test-cu test that passes on fileio passes on user:cairn"
}
