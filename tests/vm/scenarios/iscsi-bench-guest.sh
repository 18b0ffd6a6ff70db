#!/usr/bin/env bash
# Runs inside the guest (from the 9p share): log in to both iSCSI targets of the guest's own
# LIO over 127.0.0.1:3260 with open-iscsi, then run the same fio jobs on both disks, one
# after the other, and print one JSON line per (LUN, job) on stdout.
# Usage: iscsi-bench-guest.sh SECONDS IQN_CAIRN IQN_FILEIO
set -euo pipefail
secs=$1
shift
systemctl start iscsid >/dev/null 2>&1 || iscsid
iscsiadm -m discovery -t sendtargets -p 127.0.0.1:3260 >/dev/null
for iqn in "$@"; do
    iscsiadm -m node -T "$iqn" -p 127.0.0.1:3260 --login >/dev/null
done
dev() { # the disk of target IQN, once udev made the link
    local link=/dev/disk/by-path/ip-127.0.0.1:3260-iscsi-$1-lun-0
    for _ in $(seq 1 60); do
        [[ -b $link ]] && { readlink -f "$link"; return 0; }
        sleep 1
    done
    echo "no disk for $1 after 60 s" >&2
    return 1
}
# name rw bs iodepth
jobs="randread-4k randread 4k 16
randwrite-4k randwrite 4k 16
seqwrite-1m write 1m 4
seqread-1m read 1m 4"
for iqn in "$@"; do
    d=$(dev "$iqn")
    lun=${iqn##*:}
    while read -r name rw bs qd; do
        echo "fio $name on $lun ($d)" >&2
        fio --name="$name" --filename="$d" --rw="$rw" --bs="$bs" --iodepth="$qd" \
            --ioengine=libaio --direct=1 --time_based --runtime="$secs" --ramp_time=1 \
            --size=100% --output-format=json >/tmp/fio.json 2>/tmp/fio.err || {
            cat /tmp/fio.err >&2
            exit 1
        }
        python3 - "$lun" "$name" /tmp/fio.json <<'PY'
import json, sys
lun, name, path = sys.argv[1:]
j = json.load(open(path))["jobs"][0]
io = j["read"] if j["read"]["io_bytes"] else j["write"]
print(json.dumps({"lun": lun, "job": name, "iops": io["iops"], "bw_bytes": io["bw_bytes"],
                  "lat_us": io["clat_ns"]["mean"] / 1000, "errors": j["error"]}))
PY
    done <<<"$jobs"
done
for iqn in "$@"; do
    iscsiadm -m node -T "$iqn" -p 127.0.0.1:3260 --logout >/dev/null || true
done
