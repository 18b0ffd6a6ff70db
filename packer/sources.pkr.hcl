# The two ways the appliance is built; both run the same provisioners (build.pkr.hcl).

# qemu: boots packer/base.sh's GPT disk by direct kernel boot (the disk has no boot loader
# yet: scripts/grub.sh installs GRUB for BIOS and UEFI from inside the guest), provisions
# it, and leaves the disk in output_dir. TCG: no KVM on the build machines.
source "qemu" "cairn" {
  iso_url          = var.base_disk
  iso_checksum     = "none"
  disk_image       = true
  use_backing_file = false
  skip_resize_disk = true
  skip_compaction  = true
  format           = "qcow2"
  disk_interface   = "virtio"
  disk_discard     = "unmap"
  disk_cache       = "unsafe"
  net_device       = "virtio-net"
  accelerator      = var.accelerator
  machine_type     = "pc"
  cpus             = var.cpus
  memory           = var.memory
  headless         = true
  vnc_bind_address = "127.0.0.1"
  output_directory = var.output_dir
  vm_name          = var.vm_name
  qemuargs = [
    ["-cpu", "max"],
    ["-kernel", var.base_kernel],
    ["-initrd", var.base_initrd],
    ["-append", "root=UUID=${var.base_root_uuid} rw console=ttyS0,115200n8 systemd.show_status=false"],
    ["-serial", "file:${var.console_log}"],
    # ssh forward on 127.0.0.1 only (Packer's default netdev listens on every address)
    ["-netdev", "user,id=user.0,hostfwd=tcp:127.0.0.1:{{ .SSHHostPort }}-:22"],
    ["-device", "virtio-net-pci,netdev=user.0"],
  ]
  communicator         = "ssh"
  ssh_username         = "root"
  ssh_private_key_file = var.ssh_key
  ssh_timeout          = "10m"
  host_port_min        = 2222
  host_port_max        = 4444
  shutdown_command     = "systemctl poweroff"
  shutdown_timeout     = "5m"
}

# amazon-ebs: Debian's official bookworm AMI (already boots by GRUB, has the ENA and NVMe
# drivers in its cloud kernel and cloud-init's EC2 datasource); the provisioners replace
# the kernel with linux-image-amd64 (LIO, target_core_user) and install Cairn. ENA is on.
# IMDSv2: Debian's packer 1.6.6 has no metadata_options block (it came in 1.7), so
# packer/ami.sh marks the finished AMI with `aws ec2 modify-image-attribute --imds-support
# v2.0`: instances launched from it get http_tokens = required. cloud-init 22.4 uses IMDSv2
# tokens anyway.
source "amazon-ebs" "cairn" {
  region        = var.aws_region
  instance_type = var.aws_instance_type
  subnet_id     = var.aws_subnet_id
  ami_name      = "cairn-appliance-${var.version}-{{timestamp}}"
  ami_regions   = var.aws_ami_regions
  ena_support   = true
  source_ami_filter {
    filters = {
      name                = var.aws_source_ami_name
      architecture        = "x86_64"
      root-device-type    = "ebs"
      virtualization-type = "hvm"
    }
    owners      = [var.aws_source_ami_owner]
    most_recent = true
  }
  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = 8
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
  }
  ssh_username = "admin"
  tags = {
    Name    = "cairn-appliance-${var.version}"
    Version = var.version
  }
}
