#!/usr/bin/env bash
# Build (or reuse) the Debian 12 base image of the VM test guests.
#
#   tests/vm/build-image.sh        prints the image directory: base.qcow2, vmlinuz, initrd.img,
#                                  id_ed25519 (root's ssh key), built.txt
#
# The image is cached under tests/vm/cache/base-HASH/ (git-ignored), HASH being a hash of
# packages.txt and this script, so a rerun with an unchanged package list takes no time.
# Needs root (debootstrap, chroot), debootstrap, qemu-img and mkfs.ext4 (e2fsprogs >= 1.43
# for -d: no loop mount). Env: VM_MIRROR (default http://deb.debian.org/debian),
# VM_IMAGE_SIZE (default 3G), VM_CACHE_DIR, VM_PACKAGES_EXTRA (a second package list, e.g.
# packages-deploy.txt, installed with apt-get in the chroot after debootstrap: a separate
# image, its hash covering that list too).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
cache=${VM_CACHE_DIR:-$here/cache}
mirror=${VM_MIRROR:-http://deb.debian.org/debian}
size=${VM_IMAGE_SIZE:-3G}

extra=${VM_PACKAGES_EXTRA:+$(realpath "$VM_PACKAGES_EXTRA")}
hash=$(cat "$here/packages.txt" "$here/build-image.sh" ${extra:+"$extra"} | sha256sum | cut -c1-16)
out=$cache/base-$hash
if [[ -f $out/built.txt ]]; then
    echo "$out"
    exit 0
fi

log() { echo "vm-image: $*" >&2; }
for t in debootstrap qemu-img mkfs.ext4 ssh-keygen; do
    command -v "$t" >/dev/null || {
        log "$t is missing (apt-get install debootstrap qemu-utils e2fsprogs openssh-client)"
        exit 1
    }
done
[[ $(id -u) == 0 ]] || {
    log "building the image needs root (debootstrap, chroot)"
    exit 1
}

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-$hash.XXXXXX")
cleanup() {
    local m
    # unmount anything left mounted inside the chroot, deepest first
    while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$work/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r)
    rm -rf "$work"
}
trap cleanup EXIT
root=$work/root
pkgs=$(grep -v '^\s*#' "$here/packages.txt" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

start=$SECONDS
log "debootstrap bookworm ($pkgs) from $mirror; takes a few minutes"
debootstrap --variant=minbase --include="$pkgs" bookworm "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    log "debootstrap failed (log above)"
    exit 1
}
log "debootstrap done in $((SECONDS - start)) s"
if [[ -n $extra ]]; then
    # a long list goes through apt (debootstrap --include resolves it badly); no daemon
    # starts in the chroot
    xpkgs=$(grep -v '^\s*#' "$extra" | tr -s ' \n' ' ')
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --bind /dev "$root/dev"
    mount -t devpts devpts "$root/dev/pts"
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    log "installing the packages of $(basename "$extra") in the chroot:$xpkgs"
    chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get -q update &&
        apt-get -qy -o Dpkg::Options::=--force-unsafe-io install --no-install-recommends $xpkgs" \
        >"$work/apt.log" 2>&1 || {
        tail -n 30 "$work/apt.log" >&2
        log "installing the packages in the chroot failed (log above)"
        exit 1
    }
    umount "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc"
    rm -f "$root/usr/sbin/policy-rc.d"
    log "extra packages installed in $((SECONDS - start)) s"
fi
log "configuring"

# --- configuration -----------------------------------------------------------------------
echo cairn-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 cairn-vm\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' >"$root/etc/fstab"
mkdir -p "$root/etc/systemd/network"
cat >"$root/etc/systemd/network/10-eth.network" <<'NET'
[Match]
Name=eth* en*

[Network]
DHCP=ipv4
NET
chroot "$root" systemctl enable systemd-networkd ssh >/dev/null 2>&1
# no getty on the serial console waiting for a login, no slow wait-online
chroot "$root" systemctl mask serial-getty@ttyS0.service systemd-networkd-wait-online.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >/dev/null 2>&1
# root logs in with the image's key only
ssh-keygen -q -t ed25519 -N '' -C cairn-vm-test -f "$work/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
cat >"$root/etc/ssh/sshd_config.d/cairn-test.conf" <<'SSH'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
SSH
# the project's files arrive through a 9p share (see lib.sh): mount point and modules
mkdir -p "$root/mnt/cairn"
printf '9p\n9pnet_virtio\n' >"$root/etc/modules-load.d/cairn-9p.conf"
# unique-per-boot machine id is fine; an empty file makes systemd create one
: >"$root/etc/machine-id"
chroot "$root" apt-get clean
# (with extra packages, apt's lists stay: Ansible's apt tasks in the guest then need no
# update under TCG while they are fresh)
[[ -n $extra ]] || rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*.bin

# --- kernel, initrd, disk ----------------------------------------------------------------
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd.img"
log "packing the root file system (kernel $kver)"
# (mkfs.ext4 -d prints "Creating regular file" on stdout even with -q: stdout carries
# only the image path.)
mkfs.ext4 -q -F -L cairn-root -d "$root" "$work/root.raw" "$size" >&2
qemu-img convert -O qcow2 "$work/root.raw" "$work/base.qcow2"
rm -f "$work/root.raw"

mkdir -p "$out.tmp"
mv "$work/base.qcow2" "$work/vmlinuz" "$work/initrd.img" "$work/id_ed25519" \
    "$work/id_ed25519.pub" "$out.tmp/"
{
    echo "hash $hash"
    echo "kernel $kver"
    echo "built $(date -u +%FT%TZ) in $((SECONDS - start)) s"
    echo "packages $pkgs"
} >"$out.tmp/built.txt"
rm -rf "$out"
mv "$out.tmp" "$out"
log "image ready in $((SECONDS - start)) s: $out"
echo "$out"
