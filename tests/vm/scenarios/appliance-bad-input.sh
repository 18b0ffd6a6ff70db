# shellcheck shell=bash
# Scenario appliance-bad-input (make vm-test SCENARIO=appliance-bad-input): bad user-data
# on the real image. One guest boots the appliance's qcow2 from its disk with a `cairn:`
# section holding an unknown role and a malformed volume spec: first boot stops before
# changing anything and says why (every problem, each naming its key) on the serial
# console, in /etc/motd, in its journal and in `cairn-appliance status` (exit 1), writes no
# done-marker, and the node answers SSH. Then, in the same guest, the section cloud-init
# stored is replaced as a fixed user-data would be: first with a missing data disk and an
# unreachable etcd (a brick node; `systemctl restart cairn-firstboot`), which fails the
# same way with those two problems, and last with no `cairn:` section: the restart finishes
# the job as the all-in-one default (vol0 mounted, status clean).
# docs/appliance.md ("First boot", "Tests").
#
# Env: APPLIANCE_IMAGE_PREBUILT=1 boots build/image as it is (no make image).
# Run it under the machine's VM lock: flock /work/vm.lock make vm-test SCENARIO=appliance-bad-input

# shellcheck source=tests/vm/appliance.sh
. "$VM_REPO/tests/vm/appliance.sh"

# bad_check WHAT MESSAGE...: first boot failed with every MESSAGE in the journal of this
# boot's last run, /etc/motd and `cairn-appliance status`, which exits 1; no done-marker
bad_check() {
    local what=$1 m
    shift
    vm_ssh c 'test ! -e /var/lib/cairn-appliance/firstboot.done' || appliance_vm_fail "$what: first boot wrote its done-marker"
    vm_ssh c 'systemctl show -p ActiveState,Result cairn-firstboot' >"$VM_DIR/unit.out" 2>&1 || true
    if vm_ssh c 'cairn-appliance status' >"$VM_DIR/status.out" 2>&1; then
        appliance_vm_fail "$what: cairn-appliance status exits 0: $(cat "$VM_DIR/status.out")"
    fi
    vm_ssh c 'cat /etc/motd' >"$VM_DIR/motd.out" 2>&1
    vm_ssh c 'journalctl -b --no-pager -u cairn-firstboot' >"$VM_DIR/journal.out" 2>&1
    for m in "Cairn first boot FAILED" "$@"; do
        grep -qF -- "$m" "$VM_DIR/motd.out" || appliance_vm_fail "$what: /etc/motd lacks '$m': $(cat "$VM_DIR/motd.out")"
        grep -qF -- "$m" "$VM_DIR/journal.out" || appliance_vm_fail "$what: the journal lacks '$m'"
    done
    for m in "$@"; do
        grep -qF -- "$m" "$VM_DIR/status.out" || appliance_vm_fail "$what: cairn-appliance status lacks '$m': $(cat "$VM_DIR/status.out")"
    done
    printf '    %s\n' "$(grep -F -- '  - ' "$VM_DIR/motd.out" | tr '\n' ' ')"
}

# bad_rerun WHAT YAML: replace the cairn: section cloud-init stored (the user-data fixed
# by an operator) and run first boot again
bad_rerun() {
    local what=$1 yaml=$2
    printf '%s\n' "$yaml" | vm_ssh c 'cat >/tmp/cairn-section.yaml' || appliance_vm_fail "$what: copying the section"
    # shellcheck disable=SC2016 # expanded in the guest
    vm_ssh c 'for f in /var/lib/cloud/instance/cloud-config.txt /var/lib/cloud/instance/user-data.txt; do
        test -f $f || continue
        python3 - $f /tmp/cairn-section.yaml <<"PY" || exit 1
import sys, yaml
path, section = sys.argv[1], sys.argv[2]
doc = yaml.safe_load(open(path)) or {}
doc.pop("cairn", None)
new = yaml.safe_load(open(section)) or {}
if new.get("cairn"):
    doc["cairn"] = new["cairn"]
open(path, "w").write("#cloud-config\n" + yaml.safe_dump(doc))
PY
    done' || appliance_vm_fail "$what: rewriting the stored user-data"
    vm_step "$what: systemctl restart cairn-firstboot"
    vm_ssh c 'systemctl restart cairn-firstboot' >"$VM_DIR/restart.out" 2>&1 || true
}

scenario_main() {
    local t0
    appliance_vm_image
    appliance_vm_seed c '' '' "cairn:
  role: storage
  volume: {name: vol0, replica: 2, bricks: 3}"
    t0=$SECONDS
    vm_boot c --disk "$APPLIANCE_QCOW2" --seed "$VM_DIR/seed-c.iso" --key "$VM_DIR/id_ed25519" --user debian --mem 3072
    vm_wait c
    vm_ssh c 'systemctl is-system-running --wait >/dev/null || true'
    vm_step "c: up, first boot over ($((SECONDS - t0)) s)"
    grep -aqF "Cairn first boot FAILED" "$VM_DIR/c/console.log" ||
        appliance_vm_fail "the serial console does not say first boot failed ($VM_DIR/c/console.log)"
    grep -aqF "cairn.role: unknown role 'storage'" "$VM_DIR/c/console.log" ||
        appliance_vm_fail "the serial console does not name the unknown role"
    bad_check "unknown role, malformed volume" "cairn.role: unknown role 'storage'" \
        "cairn.volume.bricks: 3 bricks do not make whole replica sets of 2"
    vm_ssh c 'test ! -e /etc/cairn/appliance.env && ! systemctl is-active --quiet cairnd' ||
        appliance_vm_fail "first boot changed the node before failing (appliance.env, cairnd)"
    vm_step "ok: unknown role and malformed volume: on the console, in the journal, /etc/motd and status; nothing set up; SSH answers"

    bad_rerun "missing disk, unreachable etcd" "cairn:
  role: brick
  disks: [/dev/vdz]
  cluster:
    etcd: [https://10.0.2.2:1]"
    bad_check "missing disk, unreachable etcd" "cairn.disks: data disk /dev/vdz does not exist" \
        "cairn.cluster.etcd: no etcd endpoint answers (https://10.0.2.2:1 cannot be reached"
    vm_step "ok: missing disk and unreachable etcd: the same way"

    t0=$SECONDS
    bad_rerun "no cairn: section" ""
    vm_ssh c 'test -f /var/lib/cairn-appliance/firstboot.done && mountpoint -q /srv/cairn/mnt/vol0 && cairn-appliance status' \
        >"$VM_DIR/status-fixed.out" 2>&1 ||
        appliance_vm_fail "the fixed user-data did not finish first boot: $(cat "$VM_DIR/status-fixed.out" "$VM_DIR/restart.out")"
    vm_step "ok: with the cairn: section removed, first boot finishes as all-in-one ($((SECONDS - t0)) s)"
}
