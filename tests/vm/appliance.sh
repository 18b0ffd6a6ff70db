# shellcheck shell=bash
# Helpers of the VM scenarios that boot the appliance image (scenarios/appliance-*.sh),
# sourced after tests/vm/lib.sh. docs/vm-harness.md, docs/appliance.md ("Tests").
#
#   appliance_vm_image                make image IMAGE_PROFILE=<CAIRN_BIN_DIR's profile>
#                                     (reused when its inputs did not change); sets
#                                     APPLIANCE_QCOW2. APPLIANCE_IMAGE_PREBUILT=1 boots
#                                     build/image as it is.
#   appliance_vm_key                  the test's SSH key ($VM_DIR/id_ed25519)
#   appliance_vm_seed NAME MAC IP YAML  a NoCloud seed ($VM_DIR/seed-NAME.iso): the key,
#                                     the link NIC (matched by MAC; no DHCP on the link)
#                                     at IP/24 unless MAC is empty, and YAML (a cairn:
#                                     section, or nothing) appended to the cloud-config
#   appliance_vm_first_boot NAME      wait for ssh and the end of the first boot
#   appliance_vm_fail MSG             every guest's journal of the Cairn units (and
#                                     tcmu-runner's), its firstboot.json, addresses, links
#                                     and cloud-init output into its log dir, then vm_fail

# first boots under TCG on a loaded 2-core machine: ssh can take minutes
export VM_BOOT_TIMEOUT=${VM_BOOT_TIMEOUT:-900}

appliance_vm_image() {
    local bin=${CAIRN_BIN_DIR:-$VM_REPO/backend/target/debug} version t
    for t in genisoimage ssh-keygen python3 openssl; do
        command -v "$t" >/dev/null || vm_fail "$t is missing (make deps)"
    done
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$VM_REPO/backend/Cargo.toml" | head -n1)
    APPLIANCE_QCOW2=$VM_REPO/build/image/cairn-appliance-$version.qcow2
    if [[ ${APPLIANCE_IMAGE_PREBUILT:-} == 1 ]]; then
        vm_step "APPLIANCE_IMAGE_PREBUILT=1: booting $APPLIANCE_QCOW2 as it is"
    else
        t=$SECONDS
        vm_step "make image IMAGE_PROFILE=$(basename "$bin") (reused when its inputs did not change)"
        make --no-print-directory -C "$VM_REPO" image IMAGE_PROFILE="$(basename "$bin")" \
            CARGO_TARGET_DIR="$(dirname "$bin")" >"$VM_DIR/make-image.log" 2>&1 || {
            tail -n 40 "$VM_DIR/make-image.log" >&2
            vm_fail "make image (log $VM_DIR/make-image.log)"
        }
        vm_step "make image: $((SECONDS - t)) s"
    fi
    [[ -s $APPLIANCE_QCOW2 ]] || vm_fail "no $APPLIANCE_QCOW2"
}

appliance_vm_key() {
    [[ -s $VM_DIR/id_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C appliance-vm -f "$VM_DIR/id_ed25519"
}

appliance_vm_seed() {
    local name=$1 mac=$2 ip=$3 cairn=$4 d=$VM_DIR/seed-$1
    appliance_vm_key
    mkdir -p "$d"
    printf 'instance-id: iid-%s-%s-%s\n' "$VM_SCENARIO" "$name" "$$" >"$d/meta-data"
    {
        printf '#cloud-config\nssh_authorized_keys:\n  - %s\n' "$(cat "$VM_DIR/id_ed25519.pub")"
        # the link NIC's address, as an operator would set a static one: bootcmd runs
        # before first boot (cloud-init's network rendering is off in the image). It runs
        # before D-Bus is up, so `networkctl reload` fails there ("Failed to connect system
        # bus"; the address never came and a's first boot advertised an address it did
        # not have): networkd is restarted through systemd's own socket instead.
        # ConfigureWithoutCarrier: the first guest's link has no peer until the second boots.
        [[ -z $mac ]] || cat <<EOF
bootcmd:
  - [sh, -c, "printf '[Match]\\\\nMACAddress=$mac\\\\n\\\\n[Network]\\\\nAddress=$ip/24\\\\nLinkLocalAddressing=no\\\\nConfigureWithoutCarrier=yes\\\\n' >/etc/systemd/network/05-cairn-link.network && systemctl --no-block restart systemd-networkd.service && for i in \$(seq 90); do ip -4 -o addr show | grep -q ' $ip/' && break; sleep 1; done"]
EOF
        [[ -z $cairn ]] || printf '%s\n' "$cairn"
    } >"$d/user-data"
    genisoimage -quiet -V cidata -J -r -o "$VM_DIR/seed-$name.iso" "$d/user-data" "$d/meta-data"
}

appliance_vm_first_boot() {
    local name=$1 t0=$SECONDS
    vm_wait "$name"
    vm_ssh "$name" 'systemctl is-system-running --wait >/dev/null; test -f /var/lib/cairn-appliance/firstboot.done' || {
        vm_ssh "$name" 'cairn-appliance status; systemctl --failed --no-pager; journalctl -b --no-pager -u cairn-firstboot -u cairnd | tail -n 40' >&2 || true
        appliance_vm_fail "$name: first boot did not finish (console $VM_DIR/$name/console.log)"
    }
    vm_step "$name: first boot done ($((SECONDS - t0)) s after ssh)"
}

appliance_vm_fail() {
    local g
    for g in "${VM_NAMES[@]}"; do
        vm_ssh "$g" "journalctl -b --no-pager -u 'cairn*' -u cairnd -u tcmu-runner -u rtslib-fb-targetctl;
            cat /var/lib/cairn-appliance/firstboot.json; ip addr; networkctl status --no-pager -a;
            tail -n 60 /var/log/cloud-init-output.log" >"$VM_DIR/$g/journal.log" 2>&1 || true
    done
    vm_fail "$@"
}
