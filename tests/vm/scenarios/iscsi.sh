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

# ALUA group of this gateway (cairn iscsi sync --alua-tag, default 1)
ALUA_TAG=1

# cairn CLI on the host (the cluster's n1; not a gateway: nothing applied here) and in g1
# (the gateway: `cairn iscsi sync` runs the guest's targetcli against LIO).
host_cairn() { "$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr n1)" "$@"; }
guest_cairn() { vm_ssh g1 "CAIRN_HOST=$(cl_node_addr n1) cairn $*"; }

# guest_sync LOG: `cairn iscsi sync` in g1 (output in $VM_DIR/g1/LOG, also printed by
# the caller's checks); fails the scenario if it fails.
guest_sync() {
    guest_cairn iscsi sync >"$VM_DIR/g1/$1" 2>&1 || {
        cat "$VM_DIR/g1/$1" >&2
        vm_fail "cairn iscsi sync in the guest (log $VM_DIR/g1/$1)"
    }
}

# iscsi_setup SIZE_MIB: build and stage the handler and the cairn CLI, start the host
# cluster, create LUN lun0 (luns/lun0.img, SIZE_MIB, thin) and the open target
# $IQN_CAIRN mapping it with `cairn iscsi` on the host, boot guest g1 (port 3260
# forwarded), make it a gateway, create the kernel fileio LUN there ($IQN_FILEIO, same
# size) and apply the store with `cairn iscsi sync` in the guest against real targetcli +
# LIO; a second sync must change nothing. Sets $port (the host port of the guest's 3260).
# Shared with iscsi-bench.sh.
iscsi_setup() {
    local size_mib=$1 here=$VM_REPO/tests/vm/scenarios share p1 p2 cfg out
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
    strip --strip-debug -o "$share/cairn" "$CAIRN_BIN_DIR/cairn"

    vm_step "starting the host cluster (2 cairnd, volume lunvol 2x2)"
    cluster_up 2 lunvol 2 4 >"$VM_DIR/cluster.log" 2>&1
    trap vm_cleanup EXIT # lib.sh's cluster trap replaced ours: ours stops both
    p1=${CL_PORT[n1]} p2=${CL_PORT[n2]}

    vm_step "host: cairn iscsi lun create lun0, target create $IQN_CAIRN, target lun add"
    # the host is no gateway: without a conf dir the CLI only records
    export CAIRN_ISCSI_CONF_DIR=$VM_DIR/host-is-no-gateway
    host_cairn iscsi lun create lun0 --volume lunvol --size "${size_mib}M" --thin \
        >"$VM_DIR/cairn-cli.log" 2>&1 || vm_fail "lun create: $(cat "$VM_DIR/cairn-cli.log")"
    host_cairn iscsi target create "$IQN_CAIRN" --open >>"$VM_DIR/cairn-cli.log" 2>&1 ||
        vm_fail "target create: $(cat "$VM_DIR/cairn-cli.log")"
    host_cairn iscsi target lun add "$IQN_CAIRN" lun0 >>"$VM_DIR/cairn-cli.log" 2>&1 ||
        vm_fail "target lun add: $(cat "$VM_DIR/cairn-cli.log")"
    [[ $(stat -c %s "$CL_MNT/luns/lun0.img") == $((size_mib << 20)) ]] ||
        vm_fail "lun create made no ${size_mib} MiB luns/lun0.img"
    cfg=$(host_cairn --json iscsi lun show lun0 |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["cfgstring"])') ||
        vm_fail "lun show lun0"

    vm_boot g1 --fwd 3260 --share "$share"
    vm_wait g1
    vm_step "guest: LIO, tcmu-runner + handler_cairn, cairn CLI, fileio target $IQN_FILEIO"
    vm_ssh g1 "mountpoint -q /mnt/cairn || mount -t 9p -o trans=virtio,version=9p2000.L,ro cairn /mnt/cairn;
        bash /mnt/cairn/iscsi-guest.sh '$cfg' $((size_mib << 20)) $IQN_FILEIO $p1 $p2" \
        >"$VM_DIR/g1/guest-setup.log" 2>&1 || {
        cat "$VM_DIR/g1/guest-setup.log" >&2
        vm_ssh g1 "journalctl -u tcmu-runner --no-pager; cat /var/log/tcmu-runner.log" \
            >"$VM_DIR/g1/tcmu-runner.log" 2>&1 || true
        vm_fail "guest setup (logs in $VM_DIR/g1)"
    }

    vm_step "guest: cairn iscsi sync (targetcli-fb on LIO; ~1 min under TCG)"
    guest_sync sync1.log
    sed 's/^/    /' "$VM_DIR/g1/sync1.log"
    grep -q "/backstores/user:cairn create name=lun0 size=$((size_mib << 20)) cfgstring=${cfg#cairn/} " \
        "$VM_DIR/g1/sync1.log" || vm_fail "sync did not create user:cairn/lun0"
    # configfs, not targetcli ls (~20 s per call under TCG): LUN 0 of the target is the
    # user:cairn storage object lun0 with our config string
    out=$(vm_ssh g1 "cd /sys/kernel/config/target; readlink iscsi/$IQN_CAIRN/tpgt_1/lun/lun_0/*;
        cat core/user_*/lun0/info") || vm_fail "configfs of $IQN_CAIRN: $out"
    { grep -q "core/user_[0-9]*/lun0$" <<<"$out" && grep -q "Config: ${cfg}" <<<"$out"; } ||
        vm_fail "LUN 0 of $IQN_CAIRN is not user:cairn/lun0 with config $cfg: $out"
    pass "cairn iscsi sync in the guest: user:cairn/lun0 exported as LUN 0 of $IQN_CAIRN"
    guest_sync sync2.log
    grep -q "LIO is up to date: nothing to change" "$VM_DIR/g1/sync2.log" ||
        vm_fail "a second sync is no no-op: $(cat "$VM_DIR/g1/sync2.log")"
    pass "a second cairn iscsi sync changes nothing (fileio target $IQN_FILEIO left alone)"
    port=$(vm_port g1 3260)
}

scenario_main() {
    local here=$VM_REPO/tests/vm/scenarios port t0 lun iqn s
    command -v iscsi-test-cu >/dev/null || vm_fail "iscsi-test-cu missing (apt-get install libiscsi-bin)"
    command -v qemu-io >/dev/null || vm_fail "qemu-io missing (apt-get install qemu-utils)"
    # qemu's iscsi:// protocol is a module of qemu-block-extra, not of qemu-utils: without
    # it qemu-io fails only after the guest is up ("Unknown protocol 'iscsi'").
    qemu-img --help | grep -qw iscsi ||
        vm_fail "qemu-io has no iscsi protocol (apt-get install qemu-block-extra; make deps installs it)"
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

    # --- ALUA: the gateway's target port group ----------------------------------------
    vm_step "ALUA group gw$ALUA_TAG: configfs in the guest, INQUIRY/VPD 0x83/RTPG from the host"
    local alua
    alua=$(vm_ssh g1 "cd /sys/kernel/config/target; g=\$(echo core/user_*/lun0/alua/gw$ALUA_TAG);
        cat \$g/tg_pt_gp_id \$g/alua_access_type \$g/alua_access_state \$g/members;
        cat iscsi/$IQN_CAIRN/tpgt_1/lun/lun_0/alua_tg_pt_gp") || vm_fail "ALUA configfs: $alua"
    printf '%s\n' "$alua" | sed 's/^/    /'
    [[ $(sed -n 1p <<<"$alua") == "$ALUA_TAG" && $(sed -n 2p <<<"$alua") == *Implicit &&
        $(sed -n 3p <<<"$alua") == 0 ]] ||
        vm_fail "group gw$ALUA_TAG: want id $ALUA_TAG, implicit, active/optimized (0): $alua"
    grep -qx "iSCSI/$IQN_CAIRN/tpgt_1/lun_0" <<<"$alua" || vm_fail "LUN 0 is no member of gw$ALUA_TAG"
    grep -q "TG Port Alias: gw$ALUA_TAG" <<<"$alua" || vm_fail "LUN 0's ALUA group: $alua"
    alua=$(python3 "$here/iscsi-alua.py" "127.0.0.1:$port" "$IQN_CAIRN" 0 2>&1) ||
        vm_fail "ALUA from the initiator: $alua"
    printf '%s\n' "$alua" | sed 's/^/    /'
    grep -qx "tpgs 1" <<<"$alua" || vm_fail "INQUIRY TPGS is not 1 (implicit ALUA): $alua"
    grep -qx "vpd83-tpg $ALUA_TAG" <<<"$alua" || vm_fail "VPD 0x83 has no target port group $ALUA_TAG"
    grep -qx "rtpg $ALUA_TAG 0 0" <<<"$alua" ||
        vm_fail "REPORT TARGET PORT GROUPS: no group $ALUA_TAG active/optimized: $alua"
    pass "ALUA: implicit, VPD 0x83 and RTPG name target port group $ALUA_TAG (gw$ALUA_TAG), active/optimized"

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

    # --- removal through the CLI ----------------------------------------------------------
    vm_step "host: cairn iscsi target lun remove, target delete, lun delete; guest: sync"
    {
        host_cairn iscsi target lun remove "$IQN_CAIRN" lun0 &&
            host_cairn iscsi target delete "$IQN_CAIRN" &&
            host_cairn iscsi lun delete lun0 --keep-file
    } >>"$VM_DIR/cairn-cli.log" 2>&1 ||
        vm_fail "removing through the CLI: $(tail -n 3 "$VM_DIR/cairn-cli.log")"
    guest_sync sync3.log
    sed 's/^/    /' "$VM_DIR/g1/sync3.log"
    local gone
    gone=$(vm_ssh g1 "cd /sys/kernel/config/target; ls -d core/user_*/*/ iscsi/iqn.* 2>/dev/null") || true
    grep -q "user_" <<<"$gone" && vm_fail "a user:cairn storage object is left: $gone"
    grep -q "$IQN_CAIRN" <<<"$gone" && vm_fail "target $IQN_CAIRN is left: $gone"
    grep -qx "iscsi/$IQN_FILEIO" <<<"$gone" || vm_fail "the fileio target went too: $gone"
    iscsi-inq "$(url "$IQN_FILEIO")" >/dev/null 2>&1 || vm_fail "the fileio LUN stopped answering"
    pass "LUN and target removed with the CLI are gone from LIO after sync; fileio target untouched"
}
