# shellcheck shell=bash
# Scenario iscsi-multipath (make vm-test SCENARIO=iscsi-multipath; issue 19): a Linux
# initiator with dm-multipath over two gateways keeps writing when one gateway dies, and
# nothing it was told is written is lost.
#
# Host: 2 cairnd on 127.0.0.1 and volume lunvol (2x2); `cairn iscsi lun create lun0`,
# target $IQN (portal 10.99.0.1) mapping it. Guest g1 (one LIO, so the two gateways are two
# target portal groups of one target, each with its own user:cairn storage object -- its
# own tcmu-runner device and libcairn client -- and its own ALUA group):
#   gw1 = what `cairn iscsi sync` applies: TPG 1 on 10.99.0.1:3260, user:cairn/lun0, ALUA
#         group gw1 (tag 1);
#   gw2 = the same as a second gateway's `sync --alua-tag 2` makes it (iscsi-multipath-gw2.py):
#         TPG 2 on 10.99.0.2:3260, user:cairn/lun0-gw2 on the same file with the same unit
#         serial, ALUA group gw2 (tag 2).
# open-iscsi logs in to both portals (replacement_timeout 5 s, NOP-Out every 2 s) and
# multipathd makes one map with two ALUA paths (iscsi-multipath-guest.sh). A writer writes
# 4 KiB blocks with O_DIRECT|O_SYNC to the map; gw2 "dies": its address is taken off the
# guest's gwnet interface, so its path is a black hole (no reset, as a powered-off gateway).
# Checks: the map loses the gw2 path and keeps gw1's; the writer keeps writing (the longest
# pause around the loss is printed as `failover iscsi unplanned resumed_s=...`, the issue's
# target being 15 s); every acknowledged block reads back byte for byte from the backing
# file on the volume (host FUSE mount); gw2's address back, multipathd reinstates its path.
# About 6 minutes under TCG.

# shellcheck source=tests/integration/lib.sh
. "$VM_REPO/tests/integration/lib.sh"

IQN=iqn.2024-01.io.cairn.test:multipath

scenario_cleanup() {
    [[ -n ${CL_DIR:-} ]] || return 0
    cl_stop_all || return 1
    [[ ${VM_KEEP:-} == 1 ]] || rm -rf "$CL_DIR"
}

host_cairn() { "$CAIRN_BIN_DIR/cairn" --host "$(cl_node_addr n1)" "$@"; }
guest() { vm_ssh g1 "$*"; }

scenario_main() {
    local here=$VM_REPO/tests/vm/scenarios share map out t_loss t_end gap acked errs
    local size_mib=64
    vm_image

    vm_step "building handler_cairn.so"
    make -s -C "$VM_REPO/iscsi" TARGET_DIR="$(dirname "$CAIRN_BIN_DIR")" \
        PROFILE="$(basename "$CAIRN_BIN_DIR")" >"$VM_DIR/make.log" 2>&1 ||
        vm_fail "building handler_cairn.so (log $VM_DIR/make.log)"
    share=$VM_DIR/share
    mkdir -p "$share"
    cp "$VM_REPO/build/iscsi/handler_cairn.so" "$here"/iscsi-multipath-guest.sh \
        "$here"/iscsi-multipath-gw2.py "$here"/iscsi-multipath-writer.py "$share/"
    strip --strip-debug -o "$share/libcairn.so.1" "$CAIRN_BIN_DIR/libcairn.so"
    strip --strip-debug -o "$share/cairn" "$CAIRN_BIN_DIR/cairn"

    vm_step "starting the host cluster (2 cairnd, volume lunvol 2x2)"
    # one cluster CA for both nodes and the clients (tests/run-all.sh does the same)
    export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$VM_DIR/ca}
    export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
    mkdir -p "$CAIRN_CA_DIR"
    cluster_up 2 lunvol 2 4 >"$VM_DIR/cluster.log" 2>&1
    trap vm_cleanup EXIT # lib.sh's cluster trap replaced ours: ours stops both
    # the guest's cairn CLI and handler_cairn connect with it (/etc/cairn/credentials.pem)
    install -m 0600 "$CAIRN_CREDENTIALS" "$share/credentials.pem"

    vm_step "host: cairn iscsi lun create lun0, target create $IQN --portal 10.99.0.1, lun add"
    export CAIRN_ISCSI_CONF_DIR=$VM_DIR/host-is-no-gateway
    {
        host_cairn iscsi lun create lun0 --volume lunvol --size "${size_mib}M" --thin &&
            host_cairn iscsi target create "$IQN" --portal 10.99.0.1 --open &&
            host_cairn iscsi target lun add "$IQN" lun0
    } >"$VM_DIR/cairn-cli.log" 2>&1 || vm_fail "cairn iscsi: $(cat "$VM_DIR/cairn-cli.log")"

    vm_boot g1 --share "$share"
    vm_wait g1
    vm_step "guest: gateway setup (tcmu-runner + handler_cairn, gwnet 10.99.0.1/.2, multipathd)"
    guest "mountpoint -q /mnt/cairn || mount -t 9p -o trans=virtio,version=9p2000.L,ro cairn /mnt/cairn;
        bash /mnt/cairn/iscsi-multipath-guest.sh setup ${CL_PORT[n1]} ${CL_PORT[n2]}" \
        >"$VM_DIR/g1/setup.log" 2>&1 || {
        cat "$VM_DIR/g1/setup.log" >&2
        vm_fail "guest setup (log $VM_DIR/g1/setup.log)"
    }
    vm_step "guest: gw1 = cairn iscsi sync (~1 min under TCG); gw2 = TPG 2, ALUA tag 2"
    guest "CAIRN_HOST=$(cl_node_addr n1) cairn iscsi sync --alua-tag 1" >"$VM_DIR/g1/sync.log" 2>&1 || {
        cat "$VM_DIR/g1/sync.log" >&2
        vm_fail "cairn iscsi sync in the guest"
    }
    out=$(guest "python3 /mnt/cairn/iscsi-multipath-gw2.py $IQN lun0 10.99.0.2" 2>&1) ||
        vm_fail "gw2's LIO objects: $out"
    echo "    $out"
    pass "two gateways' paths to lun0: gw1 (cairn iscsi sync, ALUA tag 1) on 10.99.0.1, gw2 (tag 2) on 10.99.0.2"

    vm_step "guest: open-iscsi login to both portals, dm-multipath map"
    map=$(guest "bash /mnt/cairn/iscsi-multipath-guest.sh login $IQN" 2>"$VM_DIR/g1/login.log") ||
        vm_fail "login/multipath: $(cat "$VM_DIR/g1/login.log")"
    out=$(guest "multipath -ll $map") || vm_fail "multipath -ll $map"
    printf '%s\n' "$out" | sed 's/^/    /'
    grep -q "hwhandler='1 alua'" <<<"$out" || vm_fail "map $map does not use the ALUA handler: $out"
    (($(grep -cE 'active +ready +running' <<<"$out") == 2)) || vm_fail "map $map has not two ready paths"
    pass "multipath map $map: two ALUA paths (gw1, gw2), both active/ready"

    vm_step "guest: writer on /dev/mapper/$map (4 KiB O_DIRECT|O_SYNC blocks)"
    guest "rm -f /tmp/stop; setsid python3 /mnt/cairn/iscsi-multipath-writer.py /dev/mapper/$map /tmp/stop \
        </dev/null >/tmp/writer.log 2>/tmp/writer.err & disown"
    acked() { guest "grep -c '^ack' /tmp/writer.log" 2>/dev/null || echo 0; }
    for _ in $(seq 1 60); do (($(acked) >= 50)) && break; sleep 1; done
    (($(acked) >= 50)) || vm_fail "the writer did not get 50 blocks written in 60 s: $(guest 'tail -3 /tmp/writer.log /tmp/writer.err')"
    pass "writer running through both paths ($(acked) blocks)"

    vm_step "gw2 dies: 10.99.0.2 taken off gwnet (its path a black hole)"
    t_loss=$(guest "date +%s.%N; ip addr del 10.99.0.2/24 dev gwnet") || vm_fail "taking gw2's address away"
    t_loss=${t_loss%%$'\n'*}
    local failed=''
    for _ in $(seq 1 60); do
        out=$(guest "multipath -ll $map") || true
        grep -qE 'failed +faulty' <<<"$out" && grep -qE 'active +ready +running' <<<"$out" && failed=1 && break
        sleep 2
    done
    printf '%s\n' "$out" | sed 's/^/    /'
    [[ -n $failed ]] || vm_fail "the gw2 path was not failed (or gw1's went too) within 120 s"
    # writes after the map failed the path
    acked=$(acked)
    sleep 15
    (($(acked) > acked)) || vm_fail "the writer stopped after gw2 died: $(guest 'tail -3 /tmp/writer.log /tmp/writer.err')"
    pass "gw2 dead: its path failed, gw1's active; the writer goes on ($acked -> $(acked) blocks)"

    vm_step "gw2 back: 10.99.0.2 on gwnet again; multipathd reinstates its path"
    guest "ip addr add 10.99.0.2/24 dev gwnet" || vm_fail "giving gw2's address back"
    local back=''
    for _ in $(seq 1 60); do
        out=$(guest "multipath -ll $map") || true
        (($(grep -cE 'active +ready +running' <<<"$out") == 2)) && back=1 && break
        sleep 2
    done
    [[ -n $back ]] || vm_fail "gw2's path not reinstated 120 s after its address came back: $out"
    sleep 5
    pass "gw2's path reinstated: two active paths again"

    guest "touch /tmp/stop; sleep 2; cat /tmp/writer.log" >"$VM_DIR/writer.log" || vm_fail "writer log"
    t_end=$(date +%s.%N)
    # the longest pause between acknowledgements after the loss
    gap=$(python3 - "$VM_DIR/writer.log" "$t_loss" <<'PY'
import sys
acks = [float(l.split()[2]) for l in open(sys.argv[1]) if l.startswith("ack")]
t = float(sys.argv[2])
prev = max([a for a in acks if a <= t], default=t)
gap = 0.0
for a in acks:
    if a > t:
        gap = max(gap, a - prev)
        prev = a
print(f"{gap:.1f}")
PY
    )
    errs=$(grep -c '^err' "$VM_DIR/writer.log" || true)
    acked=$(grep -c '^ack' "$VM_DIR/writer.log")
    vm_step "verifying $acked acknowledged blocks in luns/lun0.img on the volume"
    python3 - "$VM_DIR/writer.log" "$CL_MNT/luns/lun0.img" <<'PY' || vm_fail "acknowledged blocks do not read back"
import sys
n = sum(1 for l in open(sys.argv[1]) if l.startswith("ack"))
bad = []
with open(sys.argv[2], "rb") as f:
    for i in range(n):
        f.seek(i * 4096)
        head = b"blk %08d\n" % i
        if f.read(4096) != head + bytes([i & 0xFF]) * (4096 - len(head)):
            bad.append(i)
if bad:
    sys.exit(f"{len(bad)} of {n} acknowledged blocks differ, first {bad[:10]}")
print(f"all {n} acknowledged blocks read back")
PY
    echo "failover iscsi unplanned resumed_s=$gap errors=$errs lost=0 estale=0"
    pass "every acknowledged block ($acked) reads back byte for byte; longest write pause after gw2 died ${gap}s, $errs write errors (run $(python3 -c "print(round($t_end - $t_loss))") s after the loss)"
}
