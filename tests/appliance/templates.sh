#!/usr/bin/env bash
# Suite appliance/templates: the Packer template set (packer/*.pkr.hcl) is formatted
# (packer fmt -check) and valid for both sources: `packer validate` of qemu.cairn with
# qemu.pkrvars.hcl and of amazon-ebs.cairn with aws.pkrvars.hcl (Debian's packer 1.6.6
# validates amazon-ebs without reaching AWS); the playbook it runs passes
# ansible-playbook --syntax-check.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
fail() {
    echo "FAIL - $*"
    exit 1
}
for t in packer ansible-playbook; do
    command -v "$t" >/dev/null || fail "$t is missing (make deps)"
done
tmp=$(mktemp -d "${CAIRN_TEST_TMP:-/tmp}/templates.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/base.qcow2" "$tmp/vmlinuz" "$tmp/initrd.img" "$tmp/dist.tar.gz"
ssh-keygen -q -t ed25519 -N "" -f "$tmp/id_ed25519"
cd "$repo/packer"
export CHECKPOINT_DISABLE=1
packer fmt -check . || fail "packer fmt -check: run packer fmt packer/"
echo "ok - packer fmt -check"
common=(-var version=0.0.0 -var "dist_tarball=$tmp/dist.tar.gz" -var "manifest=$tmp/packages.txt"
    -var "playbook=$repo/ansible/image.yml")
packer validate -only=qemu.cairn -var-file=qemu.pkrvars.hcl "${common[@]}" \
    -var "base_disk=$tmp/base.qcow2" -var "base_kernel=$tmp/vmlinuz" -var "base_initrd=$tmp/initrd.img" \
    -var "base_root_uuid=00000000-0000-0000-0000-000000000000" -var "ssh_key=$tmp/id_ed25519" . ||
    fail "packer validate of qemu.cairn"
echo "ok - packer validate qemu.cairn"
packer validate -only=amazon-ebs.cairn -var-file=aws.pkrvars.hcl "${common[@]}" . ||
    fail "packer validate of amazon-ebs.cairn"
echo "ok - packer validate amazon-ebs.cairn"
ansible-playbook --syntax-check -i localhost, "$repo/ansible/image.yml" >/dev/null ||
    fail "ansible-playbook --syntax-check ansible/image.yml"
echo "ok - ansible-playbook --syntax-check ansible/image.yml"
