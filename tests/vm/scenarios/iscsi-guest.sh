#!/usr/bin/env bash
# Runs inside the guest (from the 9p share at /mnt/cairn): make it a Cairn iSCSI gateway
# (relays to the host's cairnd, handler_cairn.so + libcairn.so.1 for tcmu-runner, the
# `cairn` CLI in /usr/local/bin, LIO modules) and create the kernel fileio LUN the
# user:cairn LUN is compared with: IQN_FILEIO -> /backstores/fileio/flun0 (SIZE_BYTES, on
# the guest's disk). The user:cairn LUN is then made by `cairn iscsi sync` (iscsi.sh).
# CFGSTRING (the LUN's config string, `cairn iscsi lun show`) is checked with tcmu-runner.
# Usage: iscsi-guest.sh CFGSTRING SIZE_BYTES IQN_FILEIO CAIRND_PORT...
# (the LIO part is iscsi-guest.py: one rtslib process instead of slow targetcli calls)
set -euo pipefail
cfg=$1 size=$2 iqn_fileio=$3
shift 3

# The cluster's node addresses are 127.0.0.1:PORT on the host: relay them to the host's
# loopback through qemu's gateway.
for p in "$@"; do
    setsid socat "TCP-LISTEN:$p,bind=127.0.0.1,fork,reuseaddr" "TCP:10.0.2.2:$p" \
        </dev/null >"/var/log/socat-$p.log" 2>&1 &
done

install -m 0644 /mnt/cairn/handler_cairn.so /usr/lib/x86_64-linux-gnu/tcmu-runner/
install -m 0755 /mnt/cairn/libcairn.so.1 /usr/local/lib/libcairn.so.1
install -m 0755 /mnt/cairn/cairn /usr/local/bin/cairn
ldconfig
modprobe target_core_user
modprobe target_core_file
modprobe iscsi_target_mod
systemctl restart tcmu-runner
for _ in $(seq 1 60); do
    systemctl is-active -q tcmu-runner && break
    sleep 1
done
systemctl is-active -q tcmu-runner || {
    journalctl -u tcmu-runner --no-pager | tail -n 30
    exit 1
}

python3 /mnt/cairn/iscsi-guest.py "$cfg" "$size" "$iqn_fileio"
