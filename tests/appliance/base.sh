#!/usr/bin/env bash
# Suite appliance/base: the appliance's base disk (packer/base.sh: debootstrap + the
# packages of packer/base-packages.txt in a chroot, laid out as a GPT disk with a BIOS boot
# partition, an ESP and the root). It is the first half of `make image`, run as its own
# suite so that each half stays within run-all's SUITE_TIMEOUT when CI builds from
# scratch; appliance/build then finds it cached (build/image-cache/base-HASH).
# run-by: make image-test (too long for make test: docs/appliance.md)
# suite-timeout: 1500
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
start=$SECONDS
base=$("$repo/packer/base.sh" "$repo/build/image-cache") || {
    echo "FAIL - packer/base.sh"
    exit 1
}
echo "base disk $base ($((SECONDS - start)) s)"
# shellcheck source=/dev/null
. "$base/base.env"
info=$(qemu-img info --output=json "$base/base.qcow2")
[[ $info == *'"virtual-size": 4294967296'* ]] || {
    echo "FAIL - the base disk is not 4 GiB: $info"
    exit 1
}
[[ -s $base/vmlinuz && -s $base/initrd.img && -n $ROOT_UUID ]] || {
    echo "FAIL - kernel, initrd or root UUID missing in $base"
    exit 1
}
echo "ok - base disk: GPT, kernel $KERNEL, root UUID $ROOT_UUID"
