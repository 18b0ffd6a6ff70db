#!/usr/bin/env bash
# Runs inside the guest (from the 9p share at /mnt/cairn): set up LIO with two iSCSI
# targets on portal 0.0.0.0:3260, each with one 64 MiB LUN 0:
#   IQN_CAIRN  -> /backstores/user:cairn/lun0 (tcmu-runner + handler_cairn, CFGSTRING)
#   IQN_FILEIO -> /backstores/fileio/flun0 (kernel fileio on the guest's disk)
# Usage: iscsi-guest.sh CFGSTRING SIZE_BYTES IQN_CAIRN IQN_FILEIO CAIRND_PORT...
# (the LIO part is iscsi-guest.py: one rtslib process instead of ~10 slow targetcli calls)
set -euo pipefail
cfg=$1 size=$2 iqn_cairn=$3 iqn_fileio=$4
shift 4

# The cluster's node addresses are 127.0.0.1:PORT on the host: relay them to the host's
# loopback through qemu's gateway.
for p in "$@"; do
    setsid socat "TCP-LISTEN:$p,bind=127.0.0.1,fork,reuseaddr" "TCP:10.0.2.2:$p" \
        </dev/null >"/var/log/socat-$p.log" 2>&1 &
done

install -m 0644 /mnt/cairn/handler_cairn.so /usr/lib/x86_64-linux-gnu/tcmu-runner/
install -m 0755 /mnt/cairn/libcairn.so.1 /usr/local/lib/libcairn.so.1
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

python3 /mnt/cairn/iscsi-guest.py "$cfg" "$size" "$iqn_cairn" "$iqn_fileio"
