#!/usr/bin/env bash
# Build the appliance images (`make image`; docs/appliance.md "Build").
#
#   packer/image.sh DIST_TARBALL VERSION [OUT_DIR]
#
# 1. packer/base.sh: the debootstrap base, a GPT disk (BIOS boot + ESP + root), cached in
#    build/image-cache/base-HASH/;
# 2. packer build -only=qemu.cairn: boots the base under qemu (TCG), installs GRUB for BIOS
#    and UEFI, runs ansible/image.yml with the dist tarball, writes the package manifest,
#    seals the disk (packer/scripts/seal.sh);
# 3. conversions with qemu-img into OUT_DIR (default build/image):
#    cairn-appliance-VERSION.qcow2, .raw, .ova (streamOptimized VMDK + OVF 1.0 descriptor +
#    manifest), cairn-appliance-VERSION.packages.txt (dpkg-query -W of the image) and
#    SHA256SUMS.
#
# The result is keyed by a hash of its inputs (the dist tarball's contents, the base, packer/,
# ansible/, appliance/): if OUT_DIR already holds a build of the same inputs, nothing is
# done (IMAGE_FORCE=1 rebuilds). Progress lines "[image +NNNs] ..." go to stdout; Packer's
# own output goes to OUT_DIR/logs/packer.log (IMAGE_VERBOSE=1 streams it too).
# Env: IMAGE_CACHE_DIR (build/image-cache), IMAGE_ACCEL (tcg), IMAGE_CPUS (2),
#      IMAGE_MEMORY (2048), IMAGE_MIRROR, IMAGE_DISK_MIB (see base.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$here/.." && pwd -P)
dist=$(realpath "${1:?usage: image.sh DIST_TARBALL VERSION [OUT_DIR]}")
version=${2:?usage: image.sh DIST_TARBALL VERSION [OUT_DIR]}
out=$(realpath -m "${3:-$repo/build/image}")
cache=$(realpath -m "${IMAGE_CACHE_DIR:-$repo/build/image-cache}")
name=cairn-appliance-$version
start=$SECONDS

step() { printf '[image +%3ds] %s\n' "$((SECONDS - start))" "$*"; }
die() {
    echo "image: $*" >&2
    exit 1
}

[[ -f $dist ]] || die "no dist tarball $dist (make dist)"
for t in packer ansible-playbook qemu-img qemu-system-x86_64 sha256sum tar; do
    command -v "$t" >/dev/null || die "$t is missing (make deps installs it)"
done
[[ -f $repo/ansible/image.yml || -n ${IMAGE_PLAYBOOK:-} ]] || die "no ansible/image.yml"
playbook=$(realpath "${IMAGE_PLAYBOOK:-$repo/ansible/image.yml}")

step "base disk (debootstrap + GPT; cached by package-list hash, a first build takes minutes)"
mkdir -p "$cache" "$out"
base=$(IMAGE_MIRROR=${IMAGE_MIRROR:-} "$here/base.sh" "$cache") || die "building the base disk failed"
# shellcheck source=/dev/null
. "$base/base.env"
step "base: $base (kernel $KERNEL)"

# inputs of this build: dist contents, base, the template set, the playbooks, the units
dirs=()
for d in "$here" "$repo/ansible" "$repo/appliance" "$(dirname "$playbook")"; do
    [[ ! -d $d ]] || dirs+=("$d")
done
inputs=$( {
    echo "$version $base ${IMAGE_ACCEL:-tcg}"
    tar -xzOf "$dist" | sha256sum
    find "${dirs[@]}" -type f -not -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)
if [[ ${IMAGE_FORCE:-} != 1 && -f $out/.inputs && $(cat "$out/.inputs") == "$inputs" &&
    -f $out/SHA256SUMS ]]; then
    step "build/image already holds a build of these inputs ($inputs): nothing to do"
    exit 0
fi
rm -f "$out/.inputs" "$out/SHA256SUMS" "$out"/cairn-appliance-*
mkdir -p "$out/logs"

work=$cache/packer-run
rm -rf "$work"
mkdir -p "$work"
step "packer build (qemu, ${IMAGE_ACCEL:-tcg}): GRUB, ansible/image.yml, manifest, seal; log: $out/logs/packer.log"
packer_args=(
    -only=qemu.cairn -color=false -timestamp-ui
    -var-file="$here/qemu.pkrvars.hcl"
    -var "version=$version"
    -var "dist_tarball=$dist"
    -var "playbook=$playbook"
    -var "manifest=$work/packages.txt"
    -var "base_disk=$base/base.qcow2"
    -var "base_kernel=$base/vmlinuz"
    -var "base_initrd=$base/initrd.img"
    -var "base_root_uuid=$ROOT_UUID"
    -var "ssh_key=$base/id_ed25519"
    -var "output_dir=$work/out"
    -var "vm_name=$name.qcow2"
    -var "console_log=$out/logs/build-console.log"
    -var "accelerator=${IMAGE_ACCEL:-tcg}"
    -var "cpus=${IMAGE_CPUS:-2}"
    -var "memory=${IMAGE_MEMORY:-2048}"
)
rc=0
(
    cd "$here"
    export PACKER_CACHE_DIR=$cache/packer_cache PACKER_NO_COLOR=1 CHECKPOINT_DISABLE=1
    if [[ ${IMAGE_VERBOSE:-} == 1 ]]; then
        packer build "${packer_args[@]}" . 2>&1 | tee "$out/logs/packer.log"
        exit "${PIPESTATUS[0]}"
    fi
    # the ==> lines are the build's progress: show them, keep the rest in the log
    packer build "${packer_args[@]}" . >"$out/logs/packer.log" 2>&1 &
    pid=$!
    tail -n +1 -F --pid="$pid" "$out/logs/packer.log" 2>/dev/null |
        grep --line-buffered -E '==> |TASK \[|PLAY RECAP|failed=[1-9]|unreachable=[1-9]' |
        sed -u -E 's/^[^|]*\| //; s/^/    /'
    wait "$pid"
) || rc=$?
if ((rc != 0)); then
    tail -n 40 "$out/logs/packer.log" >&2
    die "packer build failed (rc $rc; log $out/logs/packer.log, guest console $out/logs/build-console.log)"
fi
disk=$work/out/$name.qcow2
[[ -f $disk && -s $work/packages.txt ]] || die "packer left no disk or no package manifest in $work"

step "qcow2 (compressed)"
qemu-img convert -c -O qcow2 -o compat=1.1 "$disk" "$out/$name.qcow2"
step "raw"
qemu-img convert -O raw "$disk" "$out/$name.raw"
step "ova (streamOptimized VMDK + OVF 1.0 + manifest)"
"$here/ova.sh" "$disk" "$out/$name.ova" "$name" "$version"
{
    echo "# Debian packages of $name (dpkg-query -W); Cairn itself: $(basename "$dist")"
    cat "$work/packages.txt"
} >"$out/$name.packages.txt"
(cd "$out" && sha256sum "$name.qcow2" "$name.raw" "$name.ova" "$name.packages.txt" >SHA256SUMS)
echo "$inputs" >"$out/.inputs"
rm -rf "$work"
step "done in $((SECONDS - start)) s:"
(cd "$out" && du -h --apparent-size "$name".* SHA256SUMS | sed "s/^/    /")
