#!/bin/sh
# Packer provisioner (both sources, last): remove everything that must differ between
# instances or that only the build needed, so that each instance makes its own at first
# boot: SSH host keys, machine-id, the build's authorized_keys, cloud-init's state (so its
# first-boot modules run again), logs, apt lists. ansible/image.yml strips Cairn's own
# per-instance state (credentials, cluster identity). Packer's open SSH connection
# survives the removal of the host keys (new connections would not).
set -eu
rm -f /tmp/cairn-packages.txt
cloud-init clean --logs --seed 2>/dev/null || cloud-init clean --logs
rm -f /etc/ssh/ssh_host_*
: >/etc/machine-id
rm -f /var/lib/dbus/machine-id /var/lib/systemd/random-seed /var/lib/systemd/credential.secret
rm -f /root/.ssh/authorized_keys /home/*/.ssh/authorized_keys
rm -rf /root/.ansible /home/*/.ansible
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
rm -rf /var/log/journal/* /var/lib/systemd/timesync/* /tmp/* /var/tmp/*
find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' \) -delete
find /var/log -type f -exec truncate -s 0 {} +
# give the freed blocks back (virtio discard=unmap): the qcow2 stays small
fstrim -av || true
sync
