# shellcheck shell=bash
# NFS-Ganesha with FSAL_CAIRN: render a config, start/stop one ganesha.nfsd instance, and
# make sure rpcbind runs (Ganesha 4.3 refuses to start NFSv3 without it). Sourced by
# scripts/cluster-up.sh, scripts/cluster-down.sh, tests/nfs/lib.sh and tests/bench/nfs.sh;
# it starts nothing by itself. Needs scripts/common.sh sourced first.
#
# One instance = one directory DIR holding ganesha.conf, ganesha.pid, ganesha.log and
# the NFSv4 recovery dir. Everything binds 127.0.0.1 (Bind_Addr; NFS_BIND_ADDR=0.0.0.0 for
# the appliance, which renders its config with nfs_render_config too).
#
# Exports are changed at run time over Ganesha's DBus export manager (`cairn nfs export`,
# `cairn nfs sync`). Ganesha uses the system bus; where the machine runs none (containers),
# or with NFS_PRIVATE_BUS=1 (tests running several instances), the instance gets a private
# bus: a dbus-daemon on DIR/dbus.sock whose address is in DIR/dbus.address — run cairn
# with DBUS_SYSTEM_BUS_ADDRESS=$(cat DIR/dbus.address).

# nfs_render_config DIR PORT MNT_PORT NLM_PORT EXPORTS_FILE [GRACELESS] [PLUGINS_DIR]
# EXPORTS_FILE holds the EXPORT blocks (e.g. `cairn nfs sync`'s CONF_DIR/exports.conf); it
# is %included, so a restarted Ganesha serves what it holds then.
nfs_render_config() {
    local dir=$1 port=$2 mnt_port=$3 nlm_port=$4 exports=$5 graceless=${6:-false}
    local plugins=${7:-}
    mkdir -p "$dir/recovery"
    {
        echo "# rendered by scripts/nfs-ganesha.sh; do not edit"
        echo "NFS_CORE_PARAM {"
        echo "    Bind_Addr = ${NFS_BIND_ADDR:-127.0.0.1};"
        echo "    NFS_Port = $port;"
        echo "    MNT_Port = $mnt_port;"
        echo "    NLM_Port = $nlm_port;"
        echo "    Enable_RQUOTA = false;"
        echo "    Enable_UDP = false;"
        echo "    Protocols = 3, 4;"
        echo "    mount_path_pseudo = true;"
        [[ -n $plugins ]] && echo "    Plugins_Dir = \"$plugins\";"
        echo "}"
        echo "NFSV4 {"
        echo "    Graceless = $graceless;"
        echo "    Minor_Versions = 0, 1, 2;"
        echo "    RecoveryBackend = fs;"
        echo "    RecoveryRoot = \"$dir/recovery\";"
        echo "    Only_Numeric_Owners = true;"
        # EXCHANGE_ID must answer a USE_PNFS_MDS/USE_PNFS_DS/USE_NON_PNFS role (RFC 8881
        # §18.35). Ganesha 4.3 intersects a client's requested roles with these two: with
        # both false, a client asking only for MDS or DS gets no role at all. Both true (the
        # packaged defaults) give a valid role for every request; no layout is ever handed
        # out while FSAL_CAIRN declares no pNFS support (LAYOUTGET: LAYOUTUNAVAILABLE, no
        # fs_layout_types). See docs/nfs.md "pNFS roles".
        echo "    PNFS_MDS = true;"
        echo "    PNFS_DS = true;"
        # The global switch; each EXPORT says which delegations it grants (Delegations).
        echo "    Delegations = true;"
        [[ -n ${NFS_LEASE_LIFETIME:-} ]] && echo "    Lease_Lifetime = $NFS_LEASE_LIFETIME;"
        echo "}"
        echo "NFS_KRB5 { Active_krb5 = false; }"
        echo "MDCACHE { Entries_HWMark = 100000; }"
        echo "LOG {"
        echo "    Default_Log_Level = ${NFS_LOG_LEVEL:-EVENT};"
        # e.g. NFS_LOG_COMPONENTS="NFS4 = FULL_DEBUG; PNFS = FULL_DEBUG;"
        [[ -n ${NFS_LOG_COMPONENTS:-} ]] && echo "    Components { $NFS_LOG_COMPONENTS }"
        echo "}"
        echo "CAIRN { }"
        echo "%include \"$(realpath "$exports")\""
    } >"$dir/ganesha.conf"
}

# nfs_export_block ID VOLUME SERVERS PSEUDO [CLIENTS] [PATH] [ACCESS] [SQUASH] [DELEGATIONS]
#                  [DS_ADDRS] [LAYOUT] [FSAL_EXTRA]
# DELEGATIONS: none, read, write or readwrite (default $NFS_DELEGATIONS, else readwrite,
# as `cairn nfs export add`). DS_ADDRS given (may be "-" for none): the export hands out
# pNFS layouts (PNFS = true), its DSs at DS_ADDRS "NODE=IPV4:PORT,..." (docs/nfs.md
# "pNFS"; a node not listed: its cairnd's host, port 2049); LAYOUT: files (the default)
# or flexfiles. FSAL_EXTRA: more lines of the FSAL block (e.g. "DS_Probe_Fails = 100;").
nfs_export_block() {
    local id=$1 volume=$2 servers=$3 pseudo=$4 clients=${5:-127.0.0.1} path=${6:-/}
    local access=${7:-RW} squash=${8:-No_Root_Squash} deleg=${9:-${NFS_DELEGATIONS:-readwrite}}
    local pnfs=""
    if [[ -n ${10:-} ]]; then
        pnfs="
        PNFS = true;"
        [[ ${10} != - ]] && pnfs+="
        DS_Addrs = \"${10}\";"
        [[ -n ${11:-} ]] && pnfs+="
        Layout = ${11};"
    fi
    [[ -n ${12:-} ]] && pnfs+="
        ${12}"
    cat <<CONF
EXPORT {
    Export_Id = $id;
    Path = "$path";
    Pseudo = "$pseudo";
    Protocols = 3, 4;
    Transports = TCP;
    MaxOffsetRead = 18446744073709551615;
    SecType = sys;
    Access_Type = None;
    Squash = $squash;
    Delegations = $deleg;
    CLIENT {
        Clients = $clients;
        Access_Type = $access;
    }
    FSAL {
        Name = CAIRN;
        Volume = "$volume";
        Servers = "$servers";$pnfs
    }
}
CONF
}

# nfs_ds_export_block ID VOLUME SERVERS PSEUDO [CLIENTS]: the export that makes a DS
# Ganesha serve the pNFS data of the MDS export ID of VOLUME (the DS file handles of that
# export's layouts carry ID; Ganesha's DS I/O path needs an export of that id). SERVERS
# is this brick node's own cairnd.
nfs_ds_export_block() {
    cat <<CONF
EXPORT {
    Export_Id = $1;
    Path = "/";
    Pseudo = "$4";
    Protocols = 4;
    Transports = TCP;
    SecType = sys;
    Access_Type = None;
    Squash = No_Root_Squash;
    Delegations = none;
    CLIENT {
        Clients = ${5:-127.0.0.1};
        Access_Type = RW;
    }
    FSAL {
        Name = CAIRN;
        Volume = "$2";
        Servers = "$3";
        DS = true;
    }
}
CONF
}

# nfs_render_ds_config DIR PORT DS_FILE [PLUGINS_DIR]: a Ganesha that is a pNFS data
# server (NFSv4.1+ only, no NFSv3/MOUNT/NLM) with the DS exports in DS_FILE
# (nfs_ds_export_block).
nfs_render_ds_config() {
    local dir=$1 port=$2 ds=$3 plugins=${4:-}
    mkdir -p "$dir/recovery"
    {
        echo "# rendered by scripts/nfs-ganesha.sh; do not edit"
        echo "NFS_CORE_PARAM {"
        echo "    Bind_Addr = ${NFS_BIND_ADDR:-127.0.0.1};"
        echo "    NFS_Port = $port;"
        echo "    Enable_NLM = false;"
        echo "    Enable_RQUOTA = false;"
        echo "    Enable_UDP = false;"
        echo "    Protocols = 4;"
        [[ -n $plugins ]] && echo "    Plugins_Dir = \"$plugins\";"
        echo "}"
        echo "NFSV4 {"
        echo "    Graceless = true;"
        echo "    Minor_Versions = 1, 2;"
        echo "    RecoveryBackend = fs;"
        echo "    RecoveryRoot = \"$dir/recovery\";"
        echo "    PNFS_MDS = false;"
        echo "    PNFS_DS = true;"
        # A DS must not look like the same server as the MDS (or another DS): Linux
        # compares EXCHANGE_ID's server owner and scope, tries session trunking onto the
        # MDS's session when they match ("Session trunking failed") and never uses the DS.
        # Ganesha's default owner is the host name, the same for every instance on a host.
        echo "    Server_Owner = \"${NFS_SERVER_OWNER:-$(hostname)-ds-$port}\";"
        echo "    Server_Scope = \"${NFS_SERVER_OWNER:-$(hostname)-ds-$port}\";"
        echo "}"
        echo "NFS_KRB5 { Active_krb5 = false; }"
        echo "LOG {"
        echo "    Default_Log_Level = ${NFS_LOG_LEVEL:-EVENT};"
        # e.g. NFS_LOG_COMPONENTS="NFS4 = FULL_DEBUG; PNFS = FULL_DEBUG;"
        [[ -n ${NFS_LOG_COMPONENTS:-} ]] && echo "    Components { $NFS_LOG_COMPONENTS }"
        echo "}"
        echo "CAIRN { }"
        echo "%include \"$(realpath "$ds")\""
    } >"$dir/ganesha.conf"
}

# nfs_detached CMD...: run CMD (a daemon that outlives the caller) without the caller's
# file descriptors above 2. A daemon keeps what it inherits: started under
# `flock /work/vm.lock make vm-test ...`, rpcbind kept the lock's descriptor and with it
# the VM lock, for every later VM run, long after the scenario ended.
nfs_detached() {
    (
        local fd
        for fd in "/proc/$BASHPID/fd/"*; do
            fd=${fd##*/}
            ((fd > 2)) && eval "exec $fd>&-"
        done
        exec "$@"
    )
}

# nfs_ensure_rpcbind: start rpcbind if none runs (Debian's rpcbind crashes with
# -h 127.0.0.1, so it runs plain; it is only a port mapper).
nfs_ensure_rpcbind() {
    # one that answers here, not any rpcbind process: those of network namespaces (the ha
    # suites run one per gateway namespace) are not reachable on this 127.0.0.1
    if rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
        return 0
    fi
    command -v rpcbind >/dev/null || { log "rpcbind is not installed"; return 1; }
    mkdir -p /run/rpcbind
    nfs_detached rpcbind -w || { log "rpcbind failed to start"; return 1; }
    wait_port 127.0.0.1 111 10
}

# nfs_start_bus DIR: a private system bus for the instance in DIR (see the header).
nfs_start_bus() {
    local dir=$1 pid
    if [[ -f $dir/dbus.pid ]] && kill -0 "$(cat "$dir/dbus.pid")" 2>/dev/null; then
        return 0
    fi
    command -v dbus-daemon >/dev/null || { log "dbus-daemon is not installed (apt-get install dbus)"; return 1; }
    rm -f "$dir/dbus.sock"
    cat >"$dir/dbus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$dir/dbus.sock</listen>
  <auth>EXTERNAL</auth>
  <policy user="root">
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
CONF
    pid=$(nfs_detached dbus-daemon --config-file="$dir/dbus.conf" --fork --print-pid) ||
        { log "dbus-daemon failed to start for $dir"; return 1; }
    echo "$pid" >"$dir/dbus.pid"
    echo "unix:path=$dir/dbus.sock" >"$dir/dbus.address"
}

# nfs_bus_address DIR: the DBus address cairn must use to reach the instance in DIR.
nfs_bus_address() {
    if [[ -f $1/dbus.address ]]; then cat "$1/dbus.address"; else echo "unix:path=/run/dbus/system_bus_socket"; fi
}

# nfs_ensure_statd: start rpc.statd if none runs. Ganesha's NLM (NFSv3 locks) asks the
# local statd (found through rpcbind) to monitor each locking client and refuses the lock
# when it cannot; --no-notify: this host has no previous NFS clients to tell.
nfs_ensure_statd() {
    if pgrep -x rpc.statd >/dev/null; then
        return 0
    fi
    command -v rpc.statd >/dev/null || { log "rpc.statd is not installed (nfs-common)"; return 1; }
    nfs_detached rpc.statd --no-notify || { log "rpc.statd failed to start"; return 1; }
}

# nfs_start_ganesha DIR PORT: start ganesha.nfsd on DIR/ganesha.conf; wait for PORT.
nfs_start_ganesha() {
    local dir=$1 port=$2 pid
    command -v ganesha.nfsd >/dev/null || { log "ganesha.nfsd is not installed"; return 1; }
    nfs_ensure_rpcbind || return 1
    if [[ ${NFS_PRIVATE_BUS:-0} == 1 || ! -S /run/dbus/system_bus_socket ]]; then
        nfs_start_bus "$dir" || return 1
    fi
    nfs_ensure_statd || log "NFSv3 (NLM) locks will be refused without rpc.statd"
    : >"$dir/ganesha.log"
    DBUS_SYSTEM_BUS_ADDRESS=$(nfs_bus_address "$dir") setsid ganesha.nfsd -F -f "$dir/ganesha.conf" -L "$dir/ganesha.log" \
        -p "$dir/ganesha.pid" -N "${NFS_LOG_LEVEL:-NIV_EVENT}" \
        </dev/null >>"$dir/ganesha.out" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/ganesha.pid.self"
    if ! wait_port_pid 127.0.0.1 "$port" "$pid" 60; then
        tail -n 30 "$dir/ganesha.log" >&2 2>/dev/null || true
        log "ganesha.nfsd does not listen on 127.0.0.1:$port; see $dir/ganesha.log"
        return 1
    fi
}

# nfs_stop_ganesha DIR: stop the instance started from DIR.
nfs_stop_ganesha() {
    local dir=$1
    stop_pidfile "$dir/ganesha.pid.self" ganesha.nfsd 20 || return 1
    stop_pidfile "$dir/dbus.pid" dbus-daemon 5 || return 1
    rm -f "$dir/dbus.address" "$dir/dbus.sock"
}
