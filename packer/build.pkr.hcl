# What runs on either source: GRUB (qemu only: the AMI boots already), the same Ansible
# playbook that deploys clusters (ansible/image.yml), the package manifest, the seal.
build {
  sources = ["source.qemu.cairn", "source.amazon-ebs.cairn"]

  provisioner "shell" {
    only            = ["qemu.cairn"]
    execute_command = "chmod +x {{ .Path }}; {{ .Vars }} {{ .Path }}"
    script          = "${path.root}/scripts/grub.sh"
  }

  provisioner "ansible" {
    only          = ["qemu.cairn"]
    playbook_file = var.playbook
    user          = "root"
    use_proxy     = false
    extra_arguments = [
      "--become",
      "-e", "cairn_dist_tarball=${var.dist_tarball}",
      "-e", "cairn_version=${var.version}",
    ]
    ansible_env_vars = [
      "ANSIBLE_HOST_KEY_CHECKING=False",
      "ANSIBLE_PIPELINING=True",
      "ANSIBLE_NOCOLOR=True",
      "ANSIBLE_FORCE_COLOR=False",
    ]
  }

  # the same on EC2, as Debian's AMI user (admin, sudo)
  provisioner "ansible" {
    only          = ["amazon-ebs.cairn"]
    playbook_file = var.playbook
    user          = "admin"
    use_proxy     = false
    extra_arguments = [
      "--become",
      "-e", "cairn_dist_tarball=${var.dist_tarball}",
      "-e", "cairn_version=${var.version}",
    ]
    ansible_env_vars = [
      "ANSIBLE_HOST_KEY_CHECKING=False",
      "ANSIBLE_PIPELINING=True",
      "ANSIBLE_NOCOLOR=True",
      "ANSIBLE_FORCE_COLOR=False",
    ]
  }

  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; sudo {{ .Vars }} {{ .Path }}"
    inline          = ["dpkg-query -W -f='$${Package} $${Version}\\n' | sort >/tmp/cairn-packages.txt"]
  }

  provisioner "file" {
    direction   = "download"
    source      = "/tmp/cairn-packages.txt"
    destination = var.manifest
  }

  provisioner "shell" {
    execute_command   = "chmod +x {{ .Path }}; sudo {{ .Vars }} {{ .Path }}"
    script            = "${path.root}/scripts/seal.sh"
    expect_disconnect = true
  }

  post-processor "manifest" {
    only       = ["amazon-ebs.cairn"]
    output     = "${var.output_dir}/packer-manifest.json"
    strip_path = true
  }
}
