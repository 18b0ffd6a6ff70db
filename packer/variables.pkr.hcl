# Variables of the appliance build. packer/image.sh sets the qemu ones (paths of the
# debootstrap base, the dist tarball, outputs); `make ami` sets the AWS ones. The per-target
# defaults live in qemu.pkrvars.hcl and aws.pkrvars.hcl (-var-file).

variable "version" {
  type        = string
  description = "Cairn version, in the image name and /etc/cairn/image-release"
}

variable "dist_tarball" {
  type        = string
  description = "scripts/dist.sh's tarball, installed by ansible/image.yml (cairn_dist_tarball)"
}

variable "playbook" {
  type        = string
  default     = "../ansible/image.yml"
  description = "the playbook Packer's ansible provisioner runs"
}

variable "manifest" {
  type        = string
  description = "host path where the package manifest (dpkg-query -W of the image) is written"
}

# --- qemu (local build from the debootstrap base) --------------------------------------------

variable "base_disk" {
  type        = string
  default     = ""
  description = "packer/base.sh's base.qcow2 (GPT, ESP, root; no boot loader yet)"
}

variable "base_kernel" {
  type    = string
  default = ""
}

variable "base_initrd" {
  type    = string
  default = ""
}

variable "base_root_uuid" {
  type        = string
  default     = ""
  description = "UUID of the base's root file system (kernel command line of the build boot)"
}

variable "ssh_key" {
  type        = string
  default     = ""
  description = "private key the base lets root log in with (removed by scripts/seal.sh)"
}

variable "output_dir" {
  type    = string
  default = "../build/image/packer"
}

variable "vm_name" {
  type    = string
  default = "cairn-appliance.qcow2"
}

variable "console_log" {
  type        = string
  default     = "/dev/null"
  description = "file that gets the build guest's serial console"
}

variable "cpus" {
  type    = number
  default = 2
}

variable "memory" {
  type    = number
  default = 2048
}

variable "accelerator" {
  type        = string
  default     = "tcg"
  description = "tcg here (KVM hangs on this machine kind); kvm where it works"
}

# --- amazon-ebs ------------------------------------------------------------------------------

variable "aws_region" {
  type    = string
  default = "eu-west-1"
}

variable "aws_instance_type" {
  type    = string
  default = "t3.medium"
}

variable "aws_source_ami_name" {
  type        = string
  default     = "debian-12-amd64-*"
  description = "name filter of the base AMI (Debian's official images)"
}

variable "aws_source_ami_owner" {
  type        = string
  default     = "136693071363"
  description = "Debian's AWS account (official Debian cloud images)"
}

variable "aws_subnet_id" {
  type    = string
  default = ""
}

variable "aws_ami_regions" {
  type        = list(string)
  default     = []
  description = "regions the AMI is copied to besides aws_region"
}
