#!/usr/bin/env bash
# Build (or reuse) the appliance's base disk: Debian 12 made by debootstrap on the host
# (native speed: every big package of base-packages.txt is installed here, not under TCG),
# laid out as a GPT disk that can boot by BIOS and by UEFI:
#
#   p1  1 MiB    BIOS boot partition (GRUB's core.img for BIOS)
#   p2  127 MiB  EFI system partition, FAT32, mounted at /boot/efi
#   p3  rest     root, ext4, label cairn-root
#
# GRUB itself is installed later, inside the guest, by Packer's first provisioner
# (packer/scripts/grub.sh), while Packer boots this disk with qemu's direct kernel boot:
# that needs no loop device on the host. The partitions are made as files
# (mkfs.ext4 -d, mkfs.vfat) and copied into the disk at their offsets.
#
#   packer/base.sh OUT_PARENT    prints the base directory: base.qcow2, vmlinuz, initrd.img,
#                                id_ed25519 (the build's ssh key, removed from the image
#                                at the end of the build), base.env (ROOT_UUID, KERNEL)
#
# Cached as OUT_PARENT/base-HASH/, HASH covering base-packages.txt and this script.
# Needs root, debootstrap, sgdisk (gdisk), mkfs.ext4 (e2fsprogs), mkfs.vfat (dosfstools),
# qemu-img. Env: IMAGE_MIRROR (http://deb.debian.org/debian), IMAGE_DISK_SIZE (4 GiB).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
parent=$(realpath -m "${1:?usage: base.sh OUT_PARENT}")
mirror=${IMAGE_MIRROR:-http://deb.debian.org/debian}
disk_mib=${IMAGE_DISK_MIB:-4096}

hash=$( (cat "$here/base-packages.txt" "$here/base.sh" && echo "$mirror $disk_mib") | sha256sum | cut -c1-16)
out=$parent/base-$hash
if [[ -f $out/base.env ]]; then
    echo "$out"
    exit 0
fi

log() { echo "image: base: $*" >&2; }
for t in debootstrap sgdisk mkfs.ext4 mkfs.vfat qemu-img ssh-keygen; do
    command -v "$t" >/dev/null || {
        log "$t is missing (apt-get install debootstrap gdisk e2fsprogs dosfstools qemu-utils openssh-client)"
        exit 1
    }
done
[[ $(id -u) == 0 ]] || {
    log "building the base needs root (debootstrap, chroot)"
    exit 1
}

mkdir -p "$parent"
work=$(mktemp -d "$parent/.base-$hash.XXXXXX")
cleanup() {
    local rc=$? m
    if ((rc != 0)); then
        cat "$work"/*.log >"$parent/base-failed.log" 2>/dev/null || true
        log "failed; logs in $parent/base-failed.log"
    fi
    while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done < <(awk -v w="$work/" -v r="$root/" 'index($2, w) == 1 || index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r)
    rm -rf "$work"
    # the package stage is kept (ROOT.done) so that a failure after it does not cost it again
    [[ -f $root.done ]] || rm -rf "$root"
}
# The root tree is made in ROOT; ROOT.done marks it complete up to the packages.
root=$parent/rootfs-$hash
trap cleanup EXIT
pkgs=$(grep -v '^\s*#' "$here/base-packages.txt" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

start=$SECONDS
if [[ -f $root.done ]]; then
    log "reusing the packages stage of an earlier run: $root"
else
    rm -rf "$root"
    # debootstrap makes a minimal system; apt-get in the chroot then installs the packages
    # (debootstrap --include of a list this long fails: it configures in the wrong order)
    log "debootstrap bookworm from $mirror"
    debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
        tail -n 30 "$work/debootstrap.log" >&2
        log "debootstrap failed (log above)"
        exit 1
    }
    log "debootstrap done in $((SECONDS - start)) s"

    cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://security.debian.org/debian-security bookworm-security main
SOURCES
    mount -t proc proc "$root/proc"
    mount -t sysfs sys "$root/sys"
    mount --bind /dev "$root/dev"
    mount -t devpts devpts "$root/dev/pts"
    # no daemon starts inside the chroot
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    log "apt-get install (security updates included): $(echo "$pkgs" | tr ',' ' ')"
    chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
        "apt-get -q update && apt-get -qy -o Dpkg::Options::=--force-confold upgrade &&
         apt-get -qy -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-unsafe-io install --no-install-recommends $(echo "$pkgs" | tr ',' ' ')" \
        >"$work/apt.log" 2>&1 || {
        tail -n 30 "$work/apt.log" >&2
        log "apt-get install failed (log above)"
        exit 1
    }
    log "packages installed in $((SECONDS - start)) s"
    umount "$root/dev/pts" "$root/dev" "$root/sys" "$root/proc"
    rm -f "$root/usr/sbin/policy-rc.d"
    touch "$root.done"
fi
# systemd-resolved manages resolv.conf in the image
if [[ -e $root/lib/systemd/systemd-resolved ]]; then
    ln -sfn ../run/systemd/resolve/stub-resolv.conf "$root/etc/resolv.conf"
fi


# --- configuration -----------------------------------------------------------------------
root_uuid=$(cat /proc/sys/kernel/random/uuid)
esp_id=$(printf '%08X' "$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')")
esp_uuid=${esp_id:0:4}-${esp_id:4:4}
echo cairn >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 cairn\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
cat >"$root/etc/fstab" <<EOF
UUID=$root_uuid / ext4 rw,relatime,errors=remount-ro 0 1
UUID=$esp_uuid /boot/efi vfat umask=0077,nofail 0 2
EOF
mkdir -p "$root/boot/efi"
# Network: DHCP on every Ethernet NIC (virtio, e1000, vmxnet3, ENA); cloud-init does not
# render network config (see 90-cairn.cfg).
mkdir -p "$root/etc/systemd/network"
cat >"$root/etc/systemd/network/10-cairn-dhcp.network" <<'NET'
[Match]
Name=en* eth*

[Network]
DHCP=yes
NET
chroot "$root" systemctl enable systemd-networkd systemd-resolved ssh >/dev/null 2>&1 || true
chroot "$root" systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1
# cloud-init: the datasources the appliance supports, no network rendering (networkd does
# DHCP), root's keys from the metadata, host keys regenerated on each new instance.
cat >"$root/etc/cloud/cloud.cfg.d/90-cairn.cfg" <<'CFG'
datasource_list: [NoCloud, ConfigDrive, Ec2, None]
network: {config: disabled}
disable_root: false
ssh_pwauth: false
ssh_deletekeys: true
ssh_genkeytypes: [rsa, ecdsa, ed25519]
CFG
# sshd: keys only. Host keys are made per instance (cloud-init, or appliance/'s
# cairn-hostkeys.service when cloud-init did not run).
cat >"$root/etc/ssh/sshd_config.d/10-cairn.conf" <<'SSH'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
SSH
# Serial console (EC2's "Get system log", the VM tests' console.log) and GRUB for both.
cat >"$root/etc/default/grub" <<'GRUB'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Cairn
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200n8 nvme_core.io_timeout=4294967295"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
GRUB_DISABLE_OS_PROBER=true
GRUB
chroot "$root" systemctl mask apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1
# The build's ssh key: Packer logs in with it; packer/scripts/seal.sh removes it.
ssh-keygen -q -t ed25519 -N '' -C cairn-image-build -f "$work/id_ed25519"
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$work/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
# the guest's own identity is made at boot (seal.sh empties these again at the end)
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
rm -f "$root/usr/sbin/policy-rc.d"
# apt's lists stay (Ansible's apt tasks then need no update under TCG while they are fresh);
# the seal at the end of the build removes them.
chroot "$root" apt-get clean

# --- kernel, initrd, disk ----------------------------------------------------------------
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd.img"
log "partitioning a ${disk_mib} MiB GPT disk and packing the root file system (kernel $kver)"
# sectors: p1 2048..4095 (1 MiB), p2 4096..264191 (127 MiB), p3 264192..end-34
disk=$work/disk.raw
truncate -s "${disk_mib}M" "$disk"
sgdisk -n 1:2048:4095 -t 1:ef02 -c 1:bios-boot \
    -n 2:4096:264191 -t 2:ef00 -c 2:esp \
    -n 3:264192:0 -t 3:8304 -c 3:cairn-root "$disk" >/dev/null
p3_end=$(sgdisk -i 3 "$disk" | awk '/^Last sector/ { print $3 }')
[[ $p3_end =~ ^[0-9]+$ ]] || {
    log "no partition 3 on $disk"
    exit 1
}
p3_sectors=$((p3_end - 264192 + 1))
mkfs.vfat -F 32 -n ESP -i "$esp_id" -C "$work/esp.img" $(((264191 - 4096 + 1) / 2)) >/dev/null
# (mkfs.ext4 -d prints "Creating regular file" on stdout even with -q)
mkfs.ext4 -q -F -L cairn-root -U "$root_uuid" -d "$root" "$work/root.img" "$((p3_sectors / 2))k" >&2
dd if="$work/esp.img" of="$disk" bs=512 seek=4096 conv=notrunc,sparse status=none
dd if="$work/root.img" of="$disk" bs=1M oflag=seek_bytes seek=$((264192 * 512)) conv=notrunc,sparse status=none
rm -f "$work/esp.img" "$work/root.img"
qemu-img convert -O qcow2 "$disk" "$work/base.qcow2"
rm -f "$disk"

mkdir -p "$out.tmp"
mv "$work/base.qcow2" "$work/vmlinuz" "$work/initrd.img" "$work/id_ed25519" \
    "$work/id_ed25519.pub" "$out.tmp/"
{
    echo "ROOT_UUID=$root_uuid"
    echo "KERNEL=$kver"
    echo "BUILT='$(date -u +%FT%TZ) in $((SECONDS - start)) s'"
} >"$out.tmp/base.env"
rm -rf "$out"
mv "$out.tmp" "$out"
rm -rf "$root" "$root.done"
log "base ready in $((SECONDS - start)) s: $out"
echo "$out"
