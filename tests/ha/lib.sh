# shellcheck shell=bash
# shellcheck disable=SC2034 # HA_* variables are for the suites that source this
# Gateway-HA harness: a Cairn cluster (etcd + one brick node) and three gateways, each
# gateway running corosync + pacemaker + Ganesha (FSAL_CAIRN) in namespaces of its own,
# plus client namespaces, all cabled to one bridge. Nothing is configured outside the
# namespaces; the subnet is 10.78.0.0/24 on the test's private bridge:
#
#   switch  ch<ID>-sw    bridge br0, one veth end per member (sw-<member>)
#   etcd    ch<ID>-etcd  10.78.0.2
#   brick   ch<ID>-n1    10.78.0.11  (cairnd :7420, volume vol0, replica 2 over 4 bricks)
#   gateway ch<ID>-gwK   10.78.0.2K  (corosync, pacemakerd, ganesha.nfsd, rpcbind, dbus,
#                                     mount-cairn of vol0 for the NFSv4 recovery records;
#                                     with ha_gw_smb: ctdbd and a clustered smbd on vfs_cairn)
#   VIP K                10.78.0.3K  (IPaddr2 on the gateway Pacemaker puts it on)
#   client  ch<ID>-cK    10.78.0.10K
#
# A gateway is a network namespace plus a "holder" process that owns its mount, UTS and
# IPC namespaces: private /run, /dev/shm, /etc/{corosync,ctdb}, /var/lib/{corosync,pacemaker,nfs,ctdb},
# hostname gwK, and the Cairn OCF agents / test fence agent overlaid on the stock agent
# directories. Everything of the gateway runs under `ha_gw GW CMD` (nsenter into the
# holder's namespaces), so killing every pid in the network namespace is a dead machine.
#
# Env: CAIRN_BIN_DIR (default backend/target/debug), CAIRN_TEST_KEEP=1 keeps the temp dir,
#      HA_TOKEN_MS (corosync token timeout, default 3000).

HA_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HA_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/support/netns.sh
. "$HA_REPO/tests/support/netns.sh"
CAIRN_BIN_DIR=${CAIRN_BIN_DIR:-$HA_REPO/backend/target/debug}
HA_TAG=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
HA_NS=ch${HA_ID:-$$}
HA_NET=10.78.0
HA_TOKEN_MS=${HA_TOKEN_MS:-3000}
HA_VENV=${NFS_VENV:-$HA_REPO/build/nfs-venv}
HA_PLUGINS=$HA_REPO/build/fsal/plugins
HA_VOLUME=vol0
HA_DIR=
HA_GWS=()
HA_CHECKS=0
declare -A HA_IP=() HA_HOLDER=()
HA_BG_PIDS=()

ha_log() { printf '%s [%s] %s\n' "$(date +%T.%3N)" "$HA_TAG" "$*" >&2; }

ha_pass() {
    HA_CHECKS=$((HA_CHECKS + 1))
    echo "ok - $*"
}

ha_fail() {
    ha_show_logs >&2
    echo "FAIL - [$HA_TAG] $*" >&2
    exit 1
}

ha_skip() {
    echo "SKIP - $*"
    exit 77
}

ha_show_logs() {
    local f
    [[ -n $HA_DIR && -d $HA_DIR ]] || return 0
    for f in "$HA_DIR"/log/*.log "$HA_DIR"/gw*/ganesha.log; do
        [[ -s $f ]] || continue
        echo "--- last lines of $f"
        grep -v -E '^\s*$' "$f" | tail -n 12
    done
}

ha_finish() {
    echo "$HA_TAG: $HA_CHECKS checks passed"
}

# --- namespaces -----------------------------------------------------------------------------

ha_prereqs() {
    local b
    for b in cairnd cairn mount-cairn libcairn.so; do
        [[ -e $CAIRN_BIN_DIR/$b ]] || ha_fail "$CAIRN_BIN_DIR/$b missing: build first"
    done
    for b in etcd corosync pacemakerd cibadmin crm_resource crm_attribute stonith_admin \
        ganesha.nfsd rpcbind rpcinfo dbus-daemon dbus-send iptables nsenter unshare; do
        command -v "$b" >/dev/null ||
            ha_fail "$b is not installed (make deps: pacemaker corosync resource-agents iptables nfs-ganesha)"
    done
    [[ -x /usr/lib/ocf/resource.d/heartbeat/IPaddr2 ]] || ha_fail "resource-agents is not installed"
    ((EUID == 0)) || ha_skip "network namespaces need root"
    make -s -C "$HA_REPO/fsal" plugins LIBCAIRN_DIR="$CAIRN_BIN_DIR" >/dev/null ||
        ha_fail "building fsal/ failed"
    if [[ ! -x $HA_VENV/bin/python ]] || ! "$HA_VENV/bin/python" -c 'import nfs_rs' 2>/dev/null; then
        { python3 -m venv "$HA_VENV" >/dev/null && "$HA_VENV/bin/pip" install -q nfs-rs; } ||
            ha_fail "cannot install the nfs-rs client from PyPI into $HA_VENV"
    fi
}

ha_init() {
    [[ -z $HA_DIR ]] || return 0
    ha_prereqs
    HA_DIR=$(mktemp -d "${CAIRN_TEST_TMP:-${TMPDIR:-/tmp}}/cairn-ha.XXXXXX")
    mkdir -p "$HA_DIR"/{log,state,bricks,etcd,res}
    trap ha_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    ha_log "dir=$HA_DIR namespaces=$HA_NS-*"
    netns_switch "$HA_NS" || ha_fail "cannot make the test network $HA_NS-sw"
}

# ha_member NAME IP: namespace ch<ID>-NAME with eth0 = IP/24 on the bridge.
ha_member() {
    local name=$1 ip=$2
    netns_member "$HA_NS" "$name" "$ip" || ha_fail "cannot add $name ($ip) to the test network"
    HA_IP[$name]=$ip
}

ha_in() {
    local ns=$HA_NS-$1
    shift
    ip netns exec "$ns" "$@"
}

# ha_power_off NAME: the machine dies: its cable is cut at the switch (a dead host answers
# nothing, not even a TCP reset) and every process of its namespace gets SIGKILL.
ha_power_off() {
    ip -n "$HA_NS-sw" link set "sw-$1" down
    ha_ns_kill "$1"
}

# ha_ns_kill NAME: SIGKILL every process in NAME's network namespace.
ha_ns_kill() {
    local pid n=0 i
    for ((i = 0; i < 5; i++)); do
        for pid in $(ip netns pids "$HA_NS-$1" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
        done
        [[ -z $(ip netns pids "$HA_NS-$1" 2>/dev/null) ]] && break
        sleep 0.1
    done
    echo "$n"
}

ha_cleanup() {
    local rc=$? ns pid
    trap - EXIT
    set +e # a kill of a process that is gone must not end the cleanup (errexit)
    for pid in "${HA_BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$HA_NS-"); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -KILL "$pid" 2>/dev/null
        done
    done
    sleep 0.3
    # FUSE mounts of the gateways lived in their private mount namespaces (gone with the
    # holders); the brick node's processes are gone too.
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$HA_NS-"); do
        ip netns del "$ns" 2>/dev/null || true
    done
    if ((rc == 0 || rc == 77)) && [[ ${CAIRN_TEST_KEEP:-} != 1 ]]; then
        rm -rf "$HA_DIR"
    elif [[ -n $HA_DIR ]]; then
        echo "[$HA_TAG] test dir kept: $HA_DIR" >&2
    fi
    exit "$rc"
}

ha_wait_tcp() { # MEMBER IP PORT TIMEOUT
    local from=$1 ip=$2 port=$3 t=$4 i
    for ((i = 0; i < t * 5; i++)); do
        ha_in "$from" timeout 1 bash -c "exec 3<>/dev/tcp/$ip/$port" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# --- the Cairn cluster ------------------------------------------------------------------------

ha_cairn_up() {
    local ip i bricks=()
    # TLS: the test CA (tests/run-all.sh exports it; a suite run alone makes its own)
    export CAIRN_CA_DIR=${CAIRN_CA_DIR:-$HA_DIR/ca}
    export CAIRN_CREDENTIALS=${CAIRN_CREDENTIALS:-$CAIRN_CA_DIR/admin.pem}
    ha_member etcd "$HA_NET.2"
    ha_member n1 "$HA_NET.11"
    ip=${HA_IP[etcd]}
    ha_in etcd setsid etcd --name ha --data-dir "$HA_DIR/etcd" \
        --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
        --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
        --initial-cluster "ha=http://$ip:2380" </dev/null >>"$HA_DIR/log/etcd.log" 2>&1 &
    disown $!
    ha_wait_tcp etcd "$ip" 2379 30 || ha_fail "etcd on $ip:2379 not up after 30s"
    ip=${HA_IP[n1]}
    mkdir -p "$HA_DIR/state/n1"
    ha_in n1 setsid "$CAIRN_BIN_DIR/cairnd" --name n1 --listen "$ip:7420" \
        --etcd "http://${HA_IP[etcd]}:2379" --state-dir "$HA_DIR/state/n1" \
        --log-file "$HA_DIR/log/cairnd-n1.log" --log-level info \
        </dev/null >>"$HA_DIR/log/cairnd-n1.out" 2>&1 &
    disown $!
    ha_wait_tcp n1 "$ip" 7420 30 || ha_fail "cairnd n1 does not listen on $ip:7420"
    for ((i = 0; i < 4; i++)); do
        mkdir -p "$HA_DIR/bricks/b$i"
        bricks+=("n1:$HA_DIR/bricks/b$i")
    done
    ha_cairn volume create "$HA_VOLUME" replica 2 "${bricks[@]}" force >/dev/null ||
        ha_fail "volume create $HA_VOLUME"
    ha_cairn volume start "$HA_VOLUME" >/dev/null || ha_fail "volume start $HA_VOLUME"
    ha_log "cairn up: etcd, cairnd n1, volume $HA_VOLUME (2x2)"
}

ha_cairn() { ha_in n1 timeout 30 "$CAIRN_BIN_DIR/cairn" --host "${HA_IP[n1]}:7420" "$@"; }
ha_servers() { echo "${HA_IP[n1]}:7420"; }

# --- gateways ---------------------------------------------------------------------------------

# ha_gw GW CMD...: run CMD inside gateway GW (its network, mount, UTS and IPC namespaces),
# with the gateway's own credential (ha_gw_namespace): Ganesha, mount-cairn, smbd, the
# agents' cairn calls -- everything a gateway sends to cairnd -- carry its identity, so a
# backend fence (cairn gateway fence GW) names this gateway only.
ha_gw() {
    local gw=$1
    shift
    nsenter -t "${HA_HOLDER[$gw]}" -n -m -u -i -- env CAIRN_CREDENTIALS="$HA_DIR/$gw/gateway.pem" "$@"
}

ha_vip() { echo "$HA_NET.3${1#gw}"; }

# ha_gw_namespace GW: the gateway's namespaces and private directories.
ha_gw_namespace() {
    local gw=$1 d=$HA_DIR/$1 i
    ha_member "$gw" "$HA_NET.2${gw#gw}"
    mkdir -p "$d"
    # its identity: a certificate of role gateway whose common name is the node name
    ha_in n1 "$CAIRN_BIN_DIR/cairn" client certificate issue "$gw" --role gateway --days 2 \
        --out "$d/gateway.pem" >/dev/null || ha_fail "cannot issue the gateway certificate of $gw"
    mkdir -p "$d"/{corosync-etc,corosync-lib,nfs-lib,ctdb-etc,ctdb-lib,mnt,log,ocf/cairn,sbin}
    cp -a /etc/ctdb/. "$d/ctdb-etc/" 2>/dev/null || true # ha_gw_smb writes its config
    mkdir -p "$d"/pacemaker-lib/{cib,pengine,blackbox,cores}
    chown -R hacluster:haclient "$d/pacemaker-lib"
    chmod 0750 "$d/pacemaker-lib"/*
    cp "$HA_REPO"/appliance/ha/ocf/* "$d/ocf/cairn/"
    cp "$HA_LIB/fence_cairn_ns" "$HA_REPO/appliance/ha/fence_cairn" "$d/sbin/"
    chmod 0755 "$d"/ocf/cairn/* "$d/sbin/fence_cairn_ns" "$d/sbin/fence_cairn"
    ha_corosync_conf >"$d/corosync-etc/corosync.conf"
    # The holder sets up the private mounts, then sleeps; its namespaces are the gateway's.
    # shellcheck disable=SC2016 # the script expands its own arguments
    ip netns exec "$HA_NS-$gw" unshare --mount --uts --ipc --propagation private -- bash -c '
        set -e
        d=$1
        hostname "$2"
        mount -t tmpfs -o mode=0755 tmpfs /run
        mkdir -p /run/dbus /run/rpcbind /run/crm /run/ganesha
        mount -t tmpfs tmpfs /dev/shm
        mount --bind "$d/corosync-etc" /etc/corosync
        mount --bind "$d/corosync-lib" /var/lib/corosync
        mount --bind "$d/pacemaker-lib" /var/lib/pacemaker
        mount --bind "$d/nfs-lib" /var/lib/nfs
        if [ -d /etc/ctdb ]; then
            mkdir -p /var/lib/ctdb
            mount --bind "$d/ctdb-etc" /etc/ctdb
            mount --bind "$d/ctdb-lib" /var/lib/ctdb
        fi
        mount -t tmpfs -o mode=0755 tmpfs /srv
        mkdir -p /srv/cairn-ha
        mount -t overlay overlay -o "lowerdir=$d/ocf:/usr/lib/ocf/resource.d" /usr/lib/ocf/resource.d
        mount -t overlay overlay -o "lowerdir=$d/sbin:/usr/sbin" /usr/sbin
        echo ready >"$d/holder.ready"
        exec sleep infinity
    ' ha-holder "$d" "$gw" </dev/null >>"$d/log/holder.log" 2>&1 &
    HA_HOLDER[$gw]=$!
    disown "$!"
    for ((i = 0; i < 50; i++)); do
        [[ -f $d/holder.ready ]] && break
        sleep 0.1
    done
    [[ -f $d/holder.ready ]] || ha_fail "gateway $gw: namespace setup failed: $(cat "$d/log/holder.log")"
    # the holder is bash exec'ing sleep: its pid stays the same
    HA_GWS+=("$gw")
}

ha_corosync_conf() {
    local gw
    cat <<CONF
# rendered by tests/ha/lib.sh
totem {
    version: 2
    cluster_name: cairn-ha-test
    transport: knet
    token: $HA_TOKEN_MS
    crypto_cipher: none
    crypto_hash: none
}
nodelist {
CONF
    for gw in gw1 gw2 gw3; do
        printf '    node {\n        ring0_addr: %s\n        name: %s\n        nodeid: %s\n    }\n' \
            "$HA_NET.2${gw#gw}" "$gw" "${gw#gw}"
    done
    cat <<CONF
}
quorum {
    provider: corosync_votequorum
}
logging {
    to_logfile: yes
    logfile: /var/lib/corosync/corosync.log
    to_stderr: no
    to_syslog: no
    timestamp: on
}
CONF
}

# ha_gw_ganesha GW: rpcbind, a system bus, the recovery mount and ganesha.nfsd in GW.
ha_gw_ganesha() {
    local gw=$1 d=$HA_DIR/$1 i
    ha_gw "$gw" rpcbind -w || ha_fail "rpcbind in $gw"
    ha_gw "$gw" dbus-daemon --system --fork --nopidfile || ha_fail "dbus-daemon in $gw"
    # The recovery records live on the volume: /srv/cairn-ha is mount-cairn's mount of it
    # (the appliance's cairn-ha.mount), private to the gateway's mount namespace.
    ha_gw "$gw" setsid "$CAIRN_BIN_DIR/mount-cairn" "$(ha_servers):/$HA_VOLUME" /srv/cairn-ha \
        </dev/null >>"$d/log/mount.log" 2>&1 &
    disown $!
    for ((i = 0; i < 100; i++)); do
        ha_gw "$gw" mountpoint -q /srv/cairn-ha && break
        sleep 0.1
    done
    ha_gw "$gw" mountpoint -q /srv/cairn-ha || ha_fail "gateway $gw: mount of $HA_VOLUME failed: $(tail -n 5 "$d/log/mount.log")"
    ha_gw "$gw" mkdir -p "/srv/cairn-ha/.cairn-ha/nfs/$gw" /srv/cairn-ha/.cairn-ha/tickle ||
        ha_fail "gateway $gw: cannot create the recovery root on $HA_VOLUME"
    "$HA_REPO/appliance/ha/ganesha-ha-conf" --node "$gw" --servers "$(ha_servers)" \
        --volume "$HA_VOLUME" --recovery-root "/srv/cairn-ha/.cairn-ha/nfs/$gw" \
        --plugins "$HA_PLUGINS" --lease 10 --grace 10 >"$d/ganesha.conf" ||
        ha_fail "rendering ganesha.conf for $gw"
    ha_gw "$gw" setsid ganesha.nfsd -F -f "$d/ganesha.conf" -L "$d/ganesha.log" -p /run/ganesha/ganesha.pid \
        -N NIV_EVENT </dev/null >>"$d/log/ganesha.out" 2>&1 &
    disown $!
    for ((i = 0; i < 150; i++)); do
        ha_gw "$gw" rpcinfo -n 2049 -t 127.0.0.1 nfs 4 >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    ha_fail "gateway $gw: ganesha.nfsd does not answer on 2049: $(tail -n 8 "$d/ganesha.log")"
}

# ha_gw_ganesha_restart GW: stop GW's Ganesha and start it again (as a reboot would).
ha_gw_ganesha_restart() {
    local gw=$1 d=$HA_DIR/$1 pid i
    pid=$(ha_gw "$gw" cat /run/ganesha/ganesha.pid) || ha_fail "$gw: no Ganesha pid file"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    ha_gw "$gw" setsid ganesha.nfsd -F -f "$d/ganesha.conf" -L "$d/ganesha.log" -p /run/ganesha/ganesha.pid \
        -N NIV_EVENT </dev/null >>"$d/log/ganesha.out" 2>&1 &
    disown $!
    for ((i = 0; i < 150; i++)); do
        ha_gw "$gw" rpcinfo -n 2049 -t 127.0.0.1 nfs 4 >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    ha_fail "gateway $gw: ganesha.nfsd does not answer on 2049 after a restart: $(tail -n 8 "$d/ganesha.log")"
}

# ha_gw_cluster GW: corosync and pacemakerd in GW.
ha_gw_cluster() {
    local gw=$1 d=$HA_DIR/$1
    ha_gw "$gw" setsid corosync -f </dev/null >>"$d/log/corosync.out" 2>&1 &
    disown $!
    ha_gw "$gw" env PCMK_logfile="$d/log/pacemaker.log" PCMK_debug=no \
        PATH="$HA_REPO/appliance/ha/bin:$PATH" \
        setsid pacemakerd -f </dev/null >>"$d/log/pacemakerd.out" 2>&1 &
    disown $!
}

# ha_gateways_up: three gateways, their Ganesha, and a formed Pacemaker cluster.
ha_gateways_up() {
    local gw i
    for gw in gw1 gw2 gw3; do ha_gw_namespace "$gw"; done
    for gw in gw1 gw2 gw3; do ha_gw_ganesha "$gw"; done
    for gw in gw1 gw2 gw3; do ha_gw_cluster "$gw"; done
    for ((i = 0; i < 120; i++)); do
        [[ $(ha_gw gw1 crm_mon -1 -X 2>/dev/null | grep -c 'online="true"') == 3 ]] && break
        sleep 0.5
    done
    ((i < 120)) || ha_fail "the three gateways did not form a Pacemaker cluster in 60s: $(ha_gw gw1 crm_mon -1 2>&1 | head -20)"
    ha_log "pacemaker cluster of gw1 gw2 gw3 formed"
}

# ha_configure: the gateway resources (see docs/ha.md) loaded by `cairn gateway ha setup`,
# run on each gateway in turn with the same arguments, as the Ansible role `ha` runs it:
# the cluster formed by ha_gateways_up is taken as it is; the first run sets fencing on and
# loads the resources (HA_FENCE_XML's fence devices with them, and with HA_BACKEND_FENCE=1
# the fencing topology), the others must change nothing (their ganesha.conf, rendered by
# ha_gw_ganesha with the same renderer, included), and a second run on gw1 neither.
ha_configure() {
    local gw out want=True
    ha_gw gw1 crm_attribute -t crm_config -n cluster-recheck-interval -v 30s || true
    ha_setup_args
    for gw in "${HA_GWS[@]}" gw1; do
        out=$(ha_setup "$gw" --json "${HA_SETUP_ARGS[@]}" 2>&1) || ha_fail "cairn gateway ha setup on $gw: $out"
        python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(0 if str(d["changed"]) == sys.argv[2] and d["cluster"] == "existing" and d["budget"]["violations"] == [] else 1)' \
            "$out" "$want" || ha_fail "cairn gateway ha setup on $gw: want changed=$want on the running cluster: $out"
        want=False
    done
    ha_log "cairn gateway ha setup: gw1 configured the cluster; ${HA_GWS[*]} and gw1 again changed nothing"
    local deadline=$((SECONDS + 60))
    until ha_vips_placed; do
        ((SECONDS < deadline)) || break
        sleep 1
    done
    ha_vips_placed || ha_fail "VIPs not on their home gateways after 60s: $(ha_gw gw1 crm_mon -1 2>&1 | tail -25)"
    ha_log "VIPs placed: $(ha_where_all)"
}

# ha_setup GW [--json] ARGS...: `cairn [--json] gateway ha setup ARGS` on GW, with this tree's
# renderers and GW's own ganesha.conf (the one ha_gw_ganesha wrote).
ha_setup() {
    local gw=$1 json=()
    shift
    [[ ${1:-} != --json ]] || { json=(--json) && shift; }
    ha_gw "$gw" env CAIRN_HA_DIR="$HA_REPO/appliance/ha" "$CAIRN_BIN_DIR/cairn" "${json[@]}" gateway ha setup \
        "$@" --ganesha-conf "$HA_DIR/$gw/ganesha.conf"
}

# ha_setup_args: HA_SETUP_ARGS, the arguments of `cairn gateway ha setup` for this test's
# cluster (HA_FENCE_XML, HA_SMB, HA_BACKEND_FENCE as ha_configure describes).
ha_setup_args() {
    local gw args
    args=(--cidr 24 --nic eth0 --recovery-root /srv/cairn-ha/.cairn-ha --servers "$(ha_servers)"
        --volume "$HA_VOLUME" --ganesha-plugins "$HA_PLUGINS" --lease 10 --grace 10
        --token-ms "$HA_TOKEN_MS" --wait 60)
    for gw in "${HA_GWS[@]}"; do args+=(--node "$gw=${HA_IP[$gw]}" --vip "$(ha_vip "$gw")"); done
    [[ -z ${HA_FENCE_XML:-} ]] || args+=(--fencing "$HA_FENCE_XML")
    [[ ${HA_SMB:-false} != true ]] || args+=(--smb)
    if [[ -n ${HA_BACKEND_FENCE:-} ]]; then
        ha_fencing_topology >"$HA_DIR/topology.xml"
        args+=(--fencing-topology "$HA_DIR/topology.xml" --unfence-credentials "$CAIRN_CREDENTIALS"
            --services-ctl "$HA_LIB/gw-services $HA_DIR")
    fi
    HA_SETUP_ARGS=("${args[@]}")
}

# ha_where VIP_RESOURCE: the node running it ("" if none).
ha_where() {
    local gw
    local out
    for gw in "${HA_GWS[@]}"; do
        ha_alive "$gw" || continue
        out=$(ha_gw "$gw" timeout 10 crm_resource --locate -r "$1" 2>/dev/null) || continue
        sed -n 's/.* is running on: \([^ ]*\).*/\1/p' <<<"$out" | head -1
        return 0
    done
}

ha_where_all() {
    local k
    for k in 1 2 3; do printf 'vip%s=%s ' "$k" "$(ha_where "vip$k")"; done
}

ha_vips_placed() {
    local k
    for k in 1 2 3; do
        [[ $(ha_where "vip$k") == "gw$k" ]] || return 1
        ha_in c1 timeout 2 bash -c "exec 3<>/dev/tcp/$(ha_vip "gw$k")/2049" 2>/dev/null || return 1
    done
}

# ha_alive GW: its holder process runs (a killed holder stays a zombie until we exit; a
# frozen gateway's is stopped, and its Pacemaker would not answer).
ha_alive() {
    local pid=${HA_HOLDER[$1]:-} st
    [[ -n $pid && -d /proc/$pid ]] || return 1
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [[ $st != Z && $st != T ]]
}

# --- clustered Samba (CTDB) ---------------------------------------------------------------

HA_SMB_USER=${HA_SMB_USER:-cairnsmb}
HA_SMB_PASS=${HA_SMB_PASS:-cairn-Test-1}
HA_RECLOCK_KEY=/cairn/ha/ctdb/reclock
HA_RECLOCK_TTL=${HA_RECLOCK_TTL:-5}

# ha_smb_prereqs: ctdb, smbd and this tree's vfs_cairn (linked into Samba's module dir
# under a name of this tree, as tests/smb does).
ha_smb_prereqs() {
    local b
    for b in ctdbd ctdb smbd smbpasswd; do
        command -v "$b" >/dev/null || ha_fail "$b is not installed (apt-get install ctdb samba)"
    done
    SMB_VFS_NAME=${SMB_VFS_NAME:-cairn_$(printf %s "$HA_REPO" | md5sum | cut -c1-8)}
    # shellcheck source=scripts/smb.sh
    . "$HA_REPO/scripts/smb.sh"
    make -s -C "$HA_REPO/vfs-module" >&2 || ha_fail "building vfs_cairn (make -C vfs-module)"
    [[ -n $(smb_module_path) ]] || ha_fail "vfs_cairn not linked into Samba's module dir"
    smb_ensure_user "$HA_SMB_USER" || ha_fail "cannot create local user $HA_SMB_USER"
    if ! "$HA_VENV/bin/python" -c 'import smbprotocol' 2>/dev/null; then
        "$HA_VENV/bin/python" -m pip install -q smbprotocol ||
            ha_fail "cannot install the smbprotocol client from PyPI into $HA_VENV"
    fi
}

# ha_ctdb_conf GW: /etc/ctdb of GW: the gateways as CTDB nodes, no public addresses (the
# Pacemaker VIPs serve SMB too), the cluster lock in etcd (appliance/ha/ctdb-etcd-reclock),
# and failure detection tuned near corosync's (keepalive 1 s x 5).
ha_ctdb_conf() {
    local gw=$1 d=$HA_DIR/$1/ctdb-etc g
    mkdir -p "$HA_DIR/$gw"/ctdb-lib/{volatile,persistent,state}
    : >"$d/nodes"
    for g in gw1 gw2 gw3; do echo "$HA_NET.2${g#gw}" >>"$d/nodes"; done
    rm -f "$d/public_addresses"
    cat >"$d/ctdb.conf" <<CONF
# rendered by tests/ha/lib.sh
[logging]
    location = file:$HA_DIR/$gw/log/ctdb.log
    log level = NOTICE
[cluster]
    cluster lock = !$HA_REPO/appliance/ha/ctdb-etcd-reclock http://${HA_IP[etcd]}:2379 $HA_RECLOCK_KEY $HA_RECLOCK_TTL
CONF
    cat >"$d/ctdb.tunables" <<CONF
KeepaliveInterval=1
KeepaliveLimit=5
CONF
}

# ha_smb_conf GW: smb.conf of GW: clustered, port 445 on every address (the VIPs come and
# go), one share [vol0] of the volume through vfs_cairn.
ha_smb_conf() {
    local gw=$1 dir=$HA_DIR/$1/smb
    smb_write_conf "$dir" 445
    sed -i -e '/^ *interfaces = /d' -e '/^ *bind interfaces only = /d' \
        -e 's/^ *netbios name = .*/    netbios name = CAIRN-HA/' "$dir/smb.conf"
    sed -i '/^\[global\]/a\    clustering = yes\n    ctdbd socket = /run/ctdb/ctdbd.socket' "$dir/smb.conf"
    smb_add_cairn_share "$dir" vol0 "$HA_VOLUME" "$(ha_servers)" /smb \
        "valid users = $HA_SMB_USER root" || ha_fail "$gw: cannot add share vol0"
}

# ha_smb_up: ctdbd on every gateway, wait until all are healthy, then a clustered smbd on
# each (the appliance's ctdb and smbd units; CTDB owns no address, see docs/ha.md).
ha_smb_up() {
    local gw i
    ha_smb_prereqs
    # the share's directory, writable by the test user (the volume root belongs to root)
    { ha_gw gw1 mkdir -p /srv/cairn-ha/smb && ha_gw gw1 chmod 0777 /srv/cairn-ha/smb; } ||
        ha_fail "cannot create /smb on $HA_VOLUME"
    for gw in "${HA_GWS[@]}"; do
        ha_ctdb_conf "$gw"
        ha_gw "$gw" mkdir -p /run/ctdb
        ha_gw "$gw" ctdbd </dev/null >>"$HA_DIR/$gw/log/ctdbd.out" 2>&1 ||
            ha_fail "$gw: ctdbd did not start: $(tail -n 5 "$HA_DIR/$gw/log/ctdb.log")"
    done
    for ((i = 0; i < 120; i++)); do
        for gw in "${HA_GWS[@]}"; do
            ha_gw "$gw" timeout 5 ctdb nodestatus >/dev/null 2>&1 || { sleep 0.5 && continue 2; }
        done
        break
    done
    ((i < 120)) || ha_fail "CTDB did not become healthy on all gateways in 60s: $(ha_gw gw1 ctdb status 2>&1 | head -12)"
    for gw in "${HA_GWS[@]}"; do
        ha_smb_conf "$gw"
        printf '%s\n%s\n' "$HA_SMB_PASS" "$HA_SMB_PASS" |
            ha_gw "$gw" smbpasswd -c "$HA_DIR/$gw/smb/smb.conf" -s -a "$HA_SMB_USER" >/dev/null ||
            ha_fail "$gw: smbpasswd for $HA_SMB_USER"
        ha_gw "$gw" setsid smbd --foreground --no-process-group --debug-stdout \
            -s "$HA_DIR/$gw/smb/smb.conf" </dev/null >>"$HA_DIR/$gw/log/smbd.log" 2>&1 &
        disown $!
    done
    for gw in "${HA_GWS[@]}"; do
        ha_wait_tcp "$gw" "${HA_IP[$gw]}" 445 30 ||
            ha_fail "$gw: smbd does not listen on 445: $(tail -n 8 "$HA_DIR/$gw/log/smbd.log")"
    done
    ha_log "ctdb healthy on ${HA_GWS[*]}; clustered smbd up: $(ha_gw gw1 ctdb status 2>&1 | grep -c 'OK') nodes OK"
}

# --- clients ----------------------------------------------------------------------------------

ha_clients_up() {
    ha_member c1 "$HA_NET.101"
    ha_member c2 "$HA_NET.102"
}

# ha_writer CLIENT NAME VERSION VIP: start tests/ha/writer.py in CLIENT's namespace.
ha_writer() {
    local client=$1 name=$2 version=$3 vip=$4
    ha_in "$client" "$HA_VENV/bin/python" "$HA_LIB/writer.py" --host "$vip" --version "$version" \
        --export "/$HA_VOLUME" --path "/ha-$name" --log "$HA_DIR/res/$name.jsonl" \
        --stop-file "$HA_DIR/res/stop" >>"$HA_DIR/log/writer-$name.log" 2>&1 &
    HA_BG_PIDS+=($!)
    echo $!
}

# ha_smb_writer CLIENT NAME VIP: start tests/ha/smb_writer.py in CLIENT's namespace (file
# smb/ha-NAME of the volume, share vol0).
ha_smb_writer() {
    local client=$1 name=$2 vip=$3
    ha_in "$client" "$HA_VENV/bin/python" "$HA_LIB/smb_writer.py" --host "$vip" --share vol0 \
        --user "$HA_SMB_USER" --password "$HA_SMB_PASS" --path "ha-$name" \
        --log "$HA_DIR/res/$name.jsonl" --stop-file "$HA_DIR/res/stop" >>"$HA_DIR/log/writer-$name.log" 2>&1 &
    HA_BG_PIDS+=($!)
    echo $!
}

# acked NAME: acknowledged records of writer NAME; acked_since NAME EPOCH: those after EPOCH.
acked() {
    local n
    n=$(grep -c '"ok": true' "$HA_DIR/res/$1.jsonl" 2>/dev/null) || true
    echo "${n:-0}"
}
acked_since() { # NAME EPOCH: acknowledged writes after EPOCH
    python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if (e:=json.loads(l))["ok"] and e["t"]>float(sys.argv[2])))' \
        "$HA_DIR/res/$1.jsonl" "$2" 2>/dev/null || echo 0
}
# --- state ------------------------------------------------------------------------------------

# ha_status GW PYTHON_CHECK: `cairn gateway ha status --json` on GW, checked by a Python
# expression over `s` (the document) and `rc` (the exit code).
ha_status() {
    local rc=0 doc
    doc=$(ha_gw "$1" "$CAIRN_BIN_DIR/cairn" gateway ha status --json 2>&1) || rc=$?
    python3 -c 'import json, sys; s = json.loads(sys.argv[1]); rc = int(sys.argv[2]); sys.exit(0 if eval("(" + sys.argv[3] + ")") else 1)' \
        "$doc" "$rc" "$2" 2>/dev/null || {
        echo "cairn gateway ha status on $1 (exit $rc) fails: $2" >&2
        echo "$doc" >&2
        return 1
    }
}
# --- fencing ----------------------------------------------------------------------------------

# ha_fencing_xml: one stonith device (tests/ha/fence_cairn_ns) that can fence every gateway
# by killing the processes of its network namespace (HA_FENCE_MODE=freeze: by freezing
# them and taking its addresses away, see fence_cairn_ns); with HA_BACKEND_FENCE=1 also
# appliance/ha/fence_cairn, the backend fence (cairnd refuses the gateway's sessions),
# which ha_fencing_topology puts first in each gateway's fencing level.
ha_fencing_xml() {
    local gw map=()
    if [[ -n ${HA_BACKEND_FENCE:-} ]]; then
        printf '<primitive id="fence-cairn" class="stonith" type="fence_cairn">'
        printf '<instance_attributes id="fence-cairn-ia">'
        printf '<nvpair id="fence-cairn-servers" name="servers" value="%s"/>' "$(ha_servers)"
        printf '<nvpair id="fence-cairn-credentials" name="credentials" value="%s"/>' "$CAIRN_CREDENTIALS"
        printf '<nvpair id="fence-cairn-cli" name="cairn" value="%s"/>' "$CAIRN_BIN_DIR/cairn"
        printf '<nvpair id="fence-cairn-hosts" name="pcmk_host_list" value="%s"/>' "${HA_GWS[*]}"
        printf '</instance_attributes>'
        printf '<operations><op id="fence-cairn-monitor" name="monitor" interval="60s"/></operations>'
        printf '</primitive>\n'
    fi
    for gw in "${HA_GWS[@]}"; do
        map+=("$gw:$(stat -L -c %i "/run/netns/$HA_NS-$gw")")
    done
    printf '<primitive id="fence-ns" class="stonith" type="fence_cairn_ns">'
    printf '<instance_attributes id="fence-ns-ia">'
    printf '<nvpair id="fence-ns-map" name="netns_map" value="%s"/>' "$(IFS=,; echo "${map[*]}")"
    printf '<nvpair id="fence-ns-hosts" name="pcmk_host_list" value="%s"/>' "${HA_GWS[*]}"
    printf '<nvpair id="fence-ns-mode" name="mode" value="%s"/>' "${HA_FENCE_MODE:-kill}"
    printf '</instance_attributes>'
    printf '<operations><op id="fence-ns-monitor" name="monitor" interval="60s"/></operations>'
    printf '</primitive>\n'
}

# ha_fencing_topology: per gateway, level 1 = the backend fence then the power fence (both
# must succeed); level 2 = the power fence alone, tried when level 1 fails (etcd or every
# cairnd unreachable: no record can be stored, but such a backend serves no gateway either).
ha_fencing_topology() {
    local gw
    printf '<fencing-topology>'
    for gw in "${HA_GWS[@]}"; do
        printf '<fencing-level id="fl-%s" target="%s" index="1" devices="fence-cairn,fence-ns"/>' "$gw" "$gw"
        printf '<fencing-level id="fl2-%s" target="%s" index="2" devices="fence-ns"/>' "$gw" "$gw"
    done
    printf '</fencing-topology>\n'
}

# ha_ns_signal NAME SIGNAL: send SIGNAL to every process of NAME's network namespace.
ha_ns_signal() {
    local pid
    for pid in $(ip netns pids "$HA_NS-$1" 2>/dev/null); do
        kill "-$2" "$pid" 2>/dev/null || true
    done
}

# ha_report TABLE UNPLANNED PLANNED WRITER_ARGS...: report.py over the writers' logs for the
# two events (each START:END:VIP, as report.py's --event takes them); prints the failover
# lines, writes results/TABLE, and leaves the per-writer JSON in HA_REPORT_JSON for the
# suite's own checks.
ha_report() {
    local table=$1 unplanned=$2 planned=$3 summary
    shift 3
    mkdir -p "$HA_LIB/results"
    summary=$("$HA_VENV/bin/python" "$HA_LIB/report.py" --event "unplanned:$unplanned" \
        --event "planned:$planned" "$@" --table "$HA_LIB/results/$table") ||
        ha_fail "report.py failed"
    grep '^failover' <<<"$summary"
    HA_REPORT_JSON=$(tail -n 1 <<<"$summary")
}

# --- the suites' common steps -------------------------------------------------------------------

# ha_cluster_up: the Cairn cluster, two clients, three gateways, fencing on and the
# resources loaded, VIPs on their home gateways. HA_BACKEND_FENCE=1: each gateway has a
# fencing level of fence_cairn + fence_cairn_ns (then fence_cairn_ns alone); HA_FENCE_MODE
# (kill, freeze) is fence_cairn_ns's mode.
ha_cluster_up() {
    ha_init
    ha_cairn_up
    ha_clients_up
    ha_gateways_up
    ha_fencing_xml >"$HA_DIR/fencing.xml"
    HA_STONITH=true HA_FENCE_XML=$HA_DIR/fencing.xml ha_configure
}

# ha_writers_wait NAME...: wait (30 s) until every writer NAME acknowledged 10 records.
ha_writers_wait() {
    local i w n
    for ((i = 0; i < 30; i++)); do
        n=0
        for w in "$@"; do (($(acked "$w") >= 10)) && n=$((n + 1)); done
        ((n == $#)) && return 0
        sleep 1
    done
    ha_fail "writers not all writing after 30s: $(for w in "$@"; do printf '%s=%s ' "$w" "$(acked "$w")"; done)($(tail -n 3 "$HA_DIR"/log/writer-*.log))"
}

# ha_writers_stop: tell the writers to stop, wait (10 s each) until they have.
ha_writers_stop() {
    local pid i
    touch "$HA_DIR/res/stop"
    for pid in "${HA_BG_PIDS[@]}"; do
        for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
}

# ha_holders VIP: the live gateways that have VIP on eth0 (one line each).
ha_holders() {
    local gw
    for gw in "${HA_GWS[@]}"; do
        ha_alive "$gw" || continue
        [[ $(ha_gw "$gw" timeout 5 ip -o addr show dev eth0 2>/dev/null) == *" $1/"* ]] && echo "$gw"
    done
    return 0
}

# ha_one_holder_each: fail when a VIP is held by two gateways.
ha_one_holder_each() {
    local k h
    for k in 1 2 3; do
        h=$(ha_holders "$(ha_vip "gw$k")" | tr '\n' ' ')
        (($(wc -w <<<"$h") <= 1)) || ha_fail "VIP $(ha_vip "gw$k") is held by two gateways: $h"
    done
}

# ha_verify CLIENT VIP NAME:PROTOCOL:VIPNAME...: read back every acknowledged record of
# each NFS writer NAME (protocol nfs3, nfs4.0, nfs4.1) through VIP from CLIENT; fails on
# a lost record. Leaves report.py's --writer arguments in HA_WRITERS.
ha_verify() {
    local client=$1 vip=$2 spec w proto vipname out lost
    shift 2
    HA_WRITERS=()
    for spec in "$@"; do
        IFS=: read -r w proto vipname <<<"$spec"
        out=$(ha_in "$client" "$HA_VENV/bin/python" "$HA_LIB/writer.py" verify --host "$vip" \
            --version "${proto#nfs}" --export "/$HA_VOLUME" --path "/ha-$w" --log "$HA_DIR/res/$w.jsonl" 2>&1) ||
            ha_fail "writer $w: acknowledged writes lost: $out"
        lost=$(sed -n 's/.*lost=\([0-9]*\).*/\1/p' <<<"$out")
        HA_WRITERS+=(--writer "$w:$proto:$vipname:$HA_DIR/res/$w.jsonl:${lost:-0}")
    done
}

# ha_report_check TABLE START:END:VIP MAX_STALL: report.py over HA_WRITERS for one
# unplanned event; prints the failover lines, saves results/TABLE, and fails on ESTALE, a
# lost record, a writer that never resumed, or (MAX_STALL > 0) a writer whose VIP did not
# move and that paused longer than MAX_STALL seconds.
ha_report_check() {
    local table=$1 event=$2 stall=$3 summary
    mkdir -p "$HA_LIB/results"
    summary=$("$HA_VENV/bin/python" "$HA_LIB/report.py" --event "unplanned:$event" "${HA_WRITERS[@]}" \
        --table "$HA_LIB/results/$table") || ha_fail "report.py failed"
    grep '^failover' <<<"$summary"
    python3 - "$(tail -n 1 <<<"$summary")" "$stall" <<'PY' || ha_fail "failover checks failed (above)"
import json, sys
bad, stall = [], float(sys.argv[2])
for r in json.loads(sys.argv[1]):
    who = f'{r["protocol"]} writer {r["writer"]} on {r["vip"]}'
    if r["estale"] or r["lost"] or r["resumed_s"] is None:
        bad.append(f"{who}: estale={r['estale']} lost={r['lost']} resumed_s={r['resumed_s']}")
    if stall > 0 and not r["moved"] and (r["max_gap_s"] or 0) > stall:
        bad.append(f"{who}: its VIP did not move but it stalled {r['max_gap_s']}s")
for b in bad:
    print("not ok - " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# ha_grace_timeline T0 [T1]: where an NFSv4 failover's time went, from the gateways'
# Ganesha logs (whole seconds): one line per grace period that started between epochs T0
# and T1 (default: now), with its start and end relative to T0, its kind (startup,
# take:IP a takeover of IP, release:IP a planned move away; several joined by "+" when a
# second one came during the same grace period, which restarts it), how many client
# records it held and how many of them had sent RECLAIM_COMPLETE at its last check:
#   failover-grace gw=gw2 event=take:10.78.0.31 start_s=12 lifted_s=22 held_s=10 clid_count=2 reclaimed=0
ha_grace_timeline() {
    local t0=$1 t1=${2:-$(date +%s.%N)} gw
    for gw in "${HA_GWS[@]}"; do
        [[ -f $HA_DIR/$gw/ganesha.log ]] || continue
        python3 - "$HA_DIR/$gw/ganesha.log" "$gw" "$t0" "$t1" <<'PY'
import re, sys, time, datetime
path, gw, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
def ts(line):
    m = re.match(r"(\d\d)/(\d\d)/(\d{4}) (\d\d):(\d\d):(\d\d) ", line)
    if not m:
        return None
    d, mo, y, h, mi, s = map(int, m.groups())
    return datetime.datetime(y, mo, d, h, mi, s).timestamp()  # the log's local time
cur = None
def emit(c):
    if c is None or not (t0 - 1 <= c["start"] <= t1):
        return
    end = c.get("lifted")
    print(f"failover-grace gw={gw} event={c['event']} start_s={c['start'] - t0:.0f} "
          + (f"lifted_s={end - t0:.0f} held_s={end - c['start']:.0f} " if end else "lifted_s=- held_s=- ")
          + f"clid_count={c.get('count', '-')} reclaimed={c.get('rc', '-')}")
for line in open(path, errors="replace"):
    t = ts(line)
    if t is None:
        continue
    if "nfs-ganesha Starting" in line:
        emit(cur); cur = {"start": t, "event": "startup"}
    elif "NFS Server Now IN GRACE" in line:
        if cur is None or "lifted" in cur:
            emit(cur); cur = {"start": t, "event": "startup"}
    elif "NFS Server recovery event" in line and cur is not None:
        m = re.search(r"event (\d+) nodeid \S+ ip (\S+)", line)
        if m:
            kind = {"5": "take", "2": "release"}.get(m.group(1), "event" + m.group(1))
            if "lifted" in cur:
                emit(cur); cur = {"start": t, "event": "startup"}
            # another event during the same grace period extends it: both are named
            ev = f"{kind}:{m.group(2)}"
            cur["event"] = ev if cur["event"] == "startup" else cur["event"] + "+" + ev
    elif "check grace:" in line and cur is not None and "lifted" not in cur:
        m = re.search(r"reclaim complete\((\d+)\) clid count\((\d+)\)", line)
        if m:
            cur["rc"], cur["count"] = int(m.group(1)), int(m.group(2))
    elif "NOT IN GRACE" in line and cur is not None:
        cur["lifted"] = t
emit(cur)
PY
    done
}
