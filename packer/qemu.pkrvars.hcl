# Local build (make image): qemu under TCG from the debootstrap base. packer/image.sh passes
# the paths (base disk, kernel, dist tarball, outputs) with -var on top of this file.
accelerator = "tcg"
cpus        = 2
memory      = 2048
