#!/usr/bin/env bash
# Runs inside the guest (from the 9p share at /mnt/cairn), scenario iscsi-multipath:
#   setup CAIRND_PORT...   make it a Cairn iSCSI gateway (relays to the host's cairnd,
#                          handler_cairn.so + libcairn.so.1, the cairn CLI, LIO modules,
#                          tcmu-runner), the two gateways' portal addresses GW1_IP and GW2_IP
#                          on a dummy interface "gwnet", and dm-multipath (multipathd) set
#                          up as for two gateways with ALUA
#   login IQN              open-iscsi: discovery on both portals, short timeouts (a dead
#                          gateway fails its path in seconds), login to both; prints the
#                          multipath device once it has two paths
# The initiator and both "gateways" are in this guest: a path goes to a local address, so
# taking GW2_IP off gwnet (the scenario's "gateway dies") turns it into a black hole, as a
# powered-off machine: no reset, no answer.
set -euo pipefail
GW1_IP=10.99.0.1 GW2_IP=10.99.0.2

case $1 in
setup)
    shift
    for p in "$@"; do
        setsid socat "TCP-LISTEN:$p,bind=127.0.0.1,fork,reuseaddr" "TCP:10.0.2.2:$p" \
            </dev/null >"/var/log/socat-$p.log" 2>&1 &
    done
    install -m 0644 /mnt/cairn/handler_cairn.so /usr/lib/x86_64-linux-gnu/tcmu-runner/
    install -m 0755 /mnt/cairn/libcairn.so.1 /usr/local/lib/libcairn.so.1
    install -m 0755 /mnt/cairn/cairn /usr/local/bin/cairn
    install -D -m 0600 /mnt/cairn/credentials.pem /etc/cairn/credentials.pem
    ldconfig
    modprobe target_core_user
    modprobe iscsi_target_mod
    modprobe dm_multipath
    modprobe dummy
    ip link add gwnet type dummy 2>/dev/null || true
    ip link set gwnet up
    ip addr replace "$GW1_IP/24" dev gwnet
    ip addr replace "$GW2_IP/24" dev gwnet
    systemctl restart tcmu-runner
    for _ in $(seq 1 60); do
        systemctl is-active -q tcmu-runner && break
        sleep 1
    done
    systemctl is-active -q tcmu-runner || {
        journalctl -u tcmu-runner --no-pager | tail -n 30
        exit 1
    }
    # dm-multipath as a Linux initiator of Cairn's gateways is set up (docs/iscsi.md): the
    # paths of one LUN (same unit serial on every gateway) in one map, ALUA priorities,
    # TUR path checks every 2 s, failback to a returning path, I/O queued 60 s (30 x 2 s)
    # when no path is left.
    cat >/etc/multipath.conf <<'CONF'
defaults {
    user_friendly_names no
    find_multipaths no
    polling_interval 2
}
blacklist {
    devnode "^vd[a-z]"
}
devices {
    device {
        vendor "LIO-ORG"
        product ".*"
        path_grouping_policy group_by_prio
        prio alua
        hardware_handler "1 alua"
        path_checker tur
        path_selector "round-robin 0"
        failback immediate
        no_path_retry 30
    }
}
CONF
    systemctl restart multipathd
    systemctl start iscsid >/dev/null 2>&1 || iscsid
    ;;
login)
    iqn=$2
    for ip in "$GW1_IP" "$GW2_IP"; do
        iscsiadm -m discovery -t sendtargets -p "$ip:3260" >/dev/null
    done
    for ip in "$GW1_IP" "$GW2_IP"; do
        for kv in node.session.timeo.replacement_timeout=5 node.conn[0].timeo.noop_out_interval=2 \
            node.conn[0].timeo.noop_out_timeout=2; do
            iscsiadm -m node -T "$iqn" -p "$ip:3260" -o update -n "${kv%%=*}" -v "${kv#*=}"
        done
        iscsiadm -m node -T "$iqn" -p "$ip:3260" --login >/dev/null
    done
    for _ in $(seq 1 60); do
        map=$(dmsetup ls --target multipath 2>/dev/null | awk '$1 != "No" {print $1; exit}')
        if [[ -n $map ]] && (($(multipath -ll "$map" 2>/dev/null | grep -cE 'active +ready +running') == 2)); then
            echo "$map"
            exit 0
        fi
        sleep 1
    done
    echo "no multipath map with two ready paths after 60 s:" >&2
    multipath -ll >&2 || true
    iscsiadm -m session >&2 || true
    exit 1
    ;;
*)
    echo "usage: $0 setup PORT... | login IQN" >&2
    exit 2
    ;;
esac
