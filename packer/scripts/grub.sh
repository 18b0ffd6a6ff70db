#!/bin/sh
# Packer provisioner (qemu source, in the guest): install GRUB on the disk Packer booted by
# direct kernel boot, for both firmwares: BIOS (core.img in the BIOS boot partition) and
# UEFI (removable path EFI/BOOT/BOOTX64.EFI on the ESP: no NVRAM entry needed, so the disk
# boots on any UEFI machine it is imported into).
set -eu
root_dev=$(findmnt -no SOURCE /)
disk=/dev/$(lsblk -no PKNAME "$root_dev")
echo "grub: root $root_dev on $disk"
mountpoint -q /boot/efi || mount /boot/efi
grub-install --target=i386-pc "$disk"
grub-install --target=x86_64-efi --efi-directory=/boot/efi --removable --no-nvram
update-grub
ls -l /boot/efi/EFI/BOOT/
