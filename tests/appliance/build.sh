#!/usr/bin/env bash
# Suite appliance/build: `make image` from the debug build of make test (IMAGE_PROFILE=debug;
# from scratch in CI: debootstrap base, packer under TCG, conversions), then checks what it
# wrote to build/image/: the qcow2, the raw image, the OVA (OVF descriptor, manifest and a
# streamOptimized VMDK, in that order), the package manifest and SHA256SUMS.
# tests/appliance/vm.sh then boots the image.
# run-by: make image-test (too long for make test: docs/appliance.md)
# suite-timeout: 2400
set -euo pipefail
# shellcheck source=tests/appliance/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t0=$SECONDS
appliance_image
vm_step "make image took $((SECONDS - t0)) s"
for f in "$name.qcow2" "$name.raw" "$name.ova" "$name.packages.txt" SHA256SUMS; do
    [[ -s $out/$f ]] || vm_fail "make image left no $f in $out"
done
(cd "$out" && sha256sum --quiet -c SHA256SUMS) || vm_fail "SHA256SUMS does not match the images"
members=$(tar -tf "$out/$name.ova" | tr '\n' ' ')
[[ $members == "$name.ovf $name.mf $name-disk1.vmdk " ]] ||
    vm_fail "OVA members are '$members', not descriptor, manifest, disk in that order"
hdr=$(head -c 4096 < <(tar -xOf "$out/$name.ova" "$name-disk1.vmdk" 2>/dev/null) | tr -d '\0')
[[ $hdr == *'createType="streamOptimized"'* ]] || vm_fail "the OVA's disk is not a streamOptimized VMDK"
for p in 'linux-image-[0-9]' nfs-ganesha samba tcmu-runner cloud-init grub-efi-amd64-bin; do
    grep -qE "^$p\S* " "$out/$name.packages.txt" || vm_fail "the package manifest lacks $p"
done
[[ $(qemu-img info --output=json "$out/$name.raw" | python3 -c 'import json,sys; print(json.load(sys.stdin)["format"])') == raw ]] ||
    vm_fail "$name.raw is not a raw image"
ok "build/image: qcow2, raw, ova (ovf, mf, streamOptimized vmdk), package manifest, SHA256SUMS"

