#!/usr/bin/env bash
# Start the single-host cluster (`make up`): etcd, one cairnd, volume vol0 (2 x 2 bricks as
# directories under run/bricks), mounted at run/mnt/vol0 with mount.cairn. Each step
# checks first, so running it again is harmless. Everything listens on 127.0.0.1.
set -euo pipefail
CAIRN_LOG_TAG=cluster-up
# shellcheck source=scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/cluster-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
# shellcheck source=scripts/etcd-tls.sh
. "$(dirname "${BASH_SOURCE[0]}")/etcd-tls.sh"

etcd_ok() {
    if [[ $CAIRN_ETCD_TLS == 1 ]]; then
        etcd_tls_healthy "$CAIRN_ETCD_URL" "$CAIRN_ETCD_TLS_DIR"
    else
        etcd_healthy "$CAIRN_ETCD_URL"
    fi
}

start_etcd() {
    local pidfile=$PID_DIR/etcd.pid tls=() scheme=http
    if [[ $CAIRN_ETCD_TLS == 1 ]]; then
        scheme=https
        etcd_tls_make "$CAIRN_ETCD_TLS_DIR" "$CAIRN_HOST" ||
            die "cannot make the etcd certificates in $CAIRN_ETCD_TLS_DIR"
        mapfile -t tls < <(etcd_tls_server_args "$CAIRN_ETCD_TLS_DIR")
    fi
    if pidfile_alive "$pidfile" etcd; then
        log "etcd already runs (pid $(cat "$pidfile"))"
    else
        port_in_use "$CAIRN_ETCD_PORT" &&
            die "port $CAIRN_ETCD_PORT is taken by another process (set CAIRN_ETCD_PORT)"
        command -v etcd >/dev/null || die "etcd is not installed: run 'make deps'"
        mkdir -p "$CAIRN_RUN_DIR/etcd"
        setsid etcd "${tls[@]}" \
            --name "cairn-$CAIRN_NODE" \
            --data-dir "$CAIRN_RUN_DIR/etcd" \
            --listen-client-urls "$CAIRN_ETCD_URL" \
            --advertise-client-urls "$CAIRN_ETCD_URL" \
            --listen-peer-urls "$scheme://$CAIRN_HOST:$CAIRN_ETCD_PEER_PORT" \
            --initial-advertise-peer-urls "$scheme://$CAIRN_HOST:$CAIRN_ETCD_PEER_PORT" \
            --initial-cluster "cairn-$CAIRN_NODE=$scheme://$CAIRN_HOST:$CAIRN_ETCD_PEER_PORT" \
            --initial-cluster-state new \
            </dev/null >>"$LOG_DIR/etcd.log" 2>&1 &
        echo $! >"$pidfile"
        log "started etcd (pid $!)"
    fi
    wait_until 30 etcd_ok ||
        die "etcd at $CAIRN_ETCD_URL is not healthy after 30s; see $LOG_DIR/etcd.log"
    if [[ $CAIRN_ETCD_TLS == 1 ]]; then
        etcd_tls_auth "$CAIRN_ETCD_URL" "$CAIRN_ETCD_TLS_DIR" /cairn ||
            die "cannot turn etcd auth on at $CAIRN_ETCD_URL (users root and cairn)"
        # this node's own etcd identity, as on the appliance: user cairn-NODE, whose role
        # may not write other nodes' liveness keys (docs/security.md, "etcd")
        etcd_tls_client "$CAIRN_ETCD_TLS_DIR" "cairn-$CAIRN_NODE" ||
            die "cannot make the etcd client certificate cairn-$CAIRN_NODE in $CAIRN_ETCD_TLS_DIR"
        etcd_tls_own_node_user "$CAIRN_ETCD_URL" "$CAIRN_ETCD_TLS_DIR" "$CAIRN_NODE" /cairn ||
            die "cannot make etcd user cairn-$CAIRN_NODE at $CAIRN_ETCD_URL"
    fi
}

start_cairnd() {
    local pidfile=$PID_DIR/cairnd-$CAIRN_NODE.pid cairnd tls=()
    cairnd=$(bin cairnd)
    [[ $CAIRN_ETCD_TLS != 1 ]] ||
        mapfile -t tls < <(etcd_tls_cairnd_args "$CAIRN_ETCD_TLS_DIR" "cairn-$CAIRN_NODE")
    if pidfile_alive "$pidfile" cairnd; then
        log "cairnd already runs (pid $(cat "$pidfile"))"
    else
        port_in_use "$CAIRN_PORT" &&
            die "port $CAIRN_PORT is taken by another process (set CAIRN_PORT)"
        [[ -x $cairnd ]] || die "no cairnd at $cairnd: run 'make install'"
        mkdir -p "$CAIRN_RUN_DIR/state/$CAIRN_NODE"
        setsid "$cairnd" \
            --name "$CAIRN_NODE" \
            --listen "$CAIRN_ADDR" \
            --etcd "$CAIRN_ETCD_URL" "${tls[@]}" \
            --state-dir "$CAIRN_RUN_DIR/state/$CAIRN_NODE" \
            --log-file "$LOG_DIR/cairnd-$CAIRN_NODE.log" \
            </dev/null >>"$LOG_DIR/cairnd-$CAIRN_NODE.out" 2>&1 &
        echo $! >"$pidfile"
        log "started cairnd $CAIRN_NODE (pid $!)"
    fi
    if ! wait_port_pid "$CAIRN_HOST" "$CAIRN_PORT" "$(cat "$pidfile")" 30; then
        tail -n 20 "$LOG_DIR/cairnd-$CAIRN_NODE.out" "$LOG_DIR/cairnd-$CAIRN_NODE.log" >&2 2>/dev/null || true
        die "cairnd does not listen on $CAIRN_ADDR; see $LOG_DIR/cairnd-$CAIRN_NODE.log"
    fi
}

# Print the status of $CAIRN_VOLUME ("absent", "Created", "Started", "Stopped").
vol_status() {
    local json
    json=$(cairn_cli volume info --json) || die "cairn volume info failed against $CAIRN_ADDR"
    volume_status "$CAIRN_VOLUME" <<<"$json"
}

ensure_volume() {
    local status i bricks=()
    status=$(vol_status)
    if [[ $status == absent ]]; then
        for ((i = 1; i <= CAIRN_BRICKS; i++)); do
            mkdir -p "$CAIRN_RUN_DIR/bricks/b$i"
            bricks+=("$CAIRN_NODE:$CAIRN_RUN_DIR/bricks/b$i")
        done
        # force: the bricks of a replica set share this one node.
        cairn_cli volume create "$CAIRN_VOLUME" replica "$CAIRN_REPLICA" "${bricks[@]}" force
        status=$(vol_status)
    fi
    if [[ $status != Started ]]; then
        cairn_cli volume start "$CAIRN_VOLUME"
        status=$(vol_status)
        [[ $status == Started ]] || die "volume $CAIRN_VOLUME is $status after 'volume start'"
    else
        log "volume $CAIRN_VOLUME already started"
    fi
}

ensure_mount() {
    local mount
    mount=$(bin mount)
    if is_mounted "$CAIRN_MNT"; then
        if stat -t "$CAIRN_MNT" >/dev/null 2>&1; then
            log "$CAIRN_MNT already mounted"
            return 0
        fi
        log "$CAIRN_MNT is a dead mount: unmounting it first"
        unmount_fuse "$CAIRN_MNT"
    fi
    [[ -x $mount ]] || die "no mount.cairn at $mount: run 'make install'"
    mkdir -p "$CAIRN_MNT"
    # mount.cairn may stay in the foreground or daemonize: background it either way and
    # wait for the mount to appear.
    setsid "$mount" "$CAIRN_ADDR:/$CAIRN_VOLUME" "$CAIRN_MNT" \
        </dev/null >>"$LOG_DIR/mount-$CAIRN_VOLUME.log" 2>&1 &
    if ! wait_mount "$CAIRN_MNT" $! 30; then
        tail -n 20 "$LOG_DIR/mount-$CAIRN_VOLUME.log" >&2 || true
        die "$CAIRN_MNT not mounted after 30s; see $LOG_DIR/mount-$CAIRN_VOLUME.log"
    fi
    log "mounted $CAIRN_VOLUME at $CAIRN_MNT"
}

# Hooks for the gateways (NFS-Ganesha with FSAL_CAIRN, smbd with vfs_cairn). Each starts
# its service if it is built and installed, checks first like the steps above, writes a pid
# file to $PID_DIR and a log to $LOG_DIR, and adds a line to print_summary. Stopped by the
# matching stop_* hooks in cluster-down.sh.
# NFS: ganesha.nfsd with FSAL_CAIRN exporting $CAIRN_VOLUME at /$CAIRN_VOLUME (NFSv3 with
# MOUNT and NLM, v4.0, v4.1, v4.2), config rendered to run/nfs/ganesha.conf. Uses the
# installed libfsalcairn.so, else build/fsal/plugins (make build makes it).
CAIRN_NFS_PORT=${CAIRN_NFS_PORT:-2049}
CAIRN_NFS_MNT_PORT=${CAIRN_NFS_MNT_PORT:-20048}
CAIRN_NFS_NLM_PORT=${CAIRN_NFS_NLM_PORT:-32803}
NFS_SUMMARY=
start_nfs_ganesha() {
    local dir=$CAIRN_RUN_DIR/nfs plugins=
    command -v ganesha.nfsd >/dev/null || { log "nfs-ganesha not installed: no NFS gateway"; return 0; }
    if [[ ! -f /usr/lib/x86_64-linux-gnu/ganesha/libfsalcairn.so ]]; then
        plugins=$CAIRN_REPO/build/fsal/plugins
        [[ -f $plugins/libfsalcairn.so ]] || { log "FSAL_CAIRN not built (make -C fsal plugins): no NFS gateway"; return 0; }
    fi
    # shellcheck source=scripts/nfs-ganesha.sh
    . "$CAIRN_REPO/scripts/nfs-ganesha.sh"
    mkdir -p "$dir"
    if pidfile_alive "$dir/ganesha.pid.self" ganesha.nfsd; then
        log "ganesha.nfsd already runs (pid $(cat "$dir/ganesha.pid.self"))"
    else
        port_in_use "$CAIRN_NFS_PORT" &&
            die "port $CAIRN_NFS_PORT is taken by another process (set CAIRN_NFS_PORT)"
        # Exports come from the config store (`cairn nfs export`), rendered into
        # $dir/cairn by `cairn nfs sync`; ganesha.conf %includes $dir/cairn/exports.conf.
        mkdir -p "$dir/cairn"
        [[ -f $dir/cairn/exports.conf ]] || : >"$dir/cairn/exports.conf"
        nfs_render_config "$dir" "$CAIRN_NFS_PORT" "$CAIRN_NFS_MNT_PORT" "$CAIRN_NFS_NLM_PORT" \
            "$dir/cairn/exports.conf" false "$plugins"
        nfs_start_ganesha "$dir" "$CAIRN_NFS_PORT" || die "ganesha.nfsd did not start; see $dir/ganesha.log"
        log "started ganesha.nfsd (pid $(cat "$dir/ganesha.pid.self"))"
    fi
    local -x DBUS_SYSTEM_BUS_ADDRESS CAIRN_NFS_CONF_DIR=$dir/cairn
    DBUS_SYSTEM_BUS_ADDRESS=$(nfs_bus_address "$dir")
    if ! cairn_cli nfs export show "/$CAIRN_VOLUME" >/dev/null 2>&1; then
        cairn_cli nfs export add "$CAIRN_VOLUME" --path "/$CAIRN_VOLUME" --clients 127.0.0.1 \
            --squash no_root_squash >>"$LOG_DIR/cairn-nfs.log" 2>&1 ||
            die "cairn nfs export add failed; see $LOG_DIR/cairn-nfs.log"
    fi
    ensure_pnfs_export
    cairn_cli nfs sync >>"$LOG_DIR/cairn-nfs.log" 2>&1 ||
        die "cairn nfs sync failed; see $LOG_DIR/cairn-nfs.log and $dir/ganesha.log"
    NFS_SUMMARY="  nfs     pid $(cat "$dir/ganesha.pid.self")  127.0.0.1:$CAIRN_NFS_PORT  export /$CAIRN_VOLUME  log $dir/ganesha.log
          mount -t nfs -o vers=4.2,port=$CAIRN_NFS_PORT 127.0.0.1:/$CAIRN_VOLUME /mnt   (or vers=3,mountport=$CAIRN_NFS_MNT_PORT)
          nfs-ls 'nfs://127.0.0.1/$CAIRN_VOLUME?nfsport=$CAIRN_NFS_PORT&mountport=$CAIRN_NFS_MNT_PORT&version=3'
          exports: DBUS_SYSTEM_BUS_ADDRESS=$DBUS_SYSTEM_BUS_ADDRESS CAIRN_NFS_CONF_DIR=$dir/cairn cairn nfs export list"
    start_nfs_ds "$plugins"
}
# smbd with vfs_cairn (scripts/smb.sh): share [$CAIRN_VOLUME] served through libcairn, on
# 127.0.0.1:445, or 4450 / a free port when 445 is taken; config and state in run/smb.
start_smbd() {
    # shellcheck source=scripts/smb.sh
    . "$CAIRN_REPO/scripts/smb.sh"
    local dir=$CAIRN_RUN_DIR/smb port user=${CAIRN_SMB_USER:-cairnsmb}
    # The SMB password: CAIRN_SMB_PASS, else one generated for this instance, kept 0600
    # in $dir/smb-password (never a fixed default, never in a log).
    local pwfile=$dir/smb-password pass
    if ! command -v smbd >/dev/null; then
        log "smbd not installed (apt-get install samba smbclient): no SMB gateway"
        return 0
    fi
    if [[ -z $(smb_module_path) ]]; then
        log "vfs_cairn not built (make -C vfs-module): no SMB gateway"
        return 0
    fi
    if pidfile_alive "$dir/smbd.pid"; then
        port=$(awk '$1 == "smb" && $2 == "ports" { print $4 }' "$dir/smb.conf")
        log "smbd already runs (pid $(cat "$dir/smbd.pid"), port $port)"
    else
        port=${CAIRN_SMB_PORT:-}
        if [[ -z $port ]]; then
            for port in 445 4450 ""; do
                [[ -n $port ]] && port_in_use "$port" && continue
                break
            done
            [[ -n $port ]] || port=$(free_port)
        fi
        mkdir -p "$dir"
        if [[ -n ${CAIRN_SMB_PASS:-} ]]; then
            (umask 077 && printf '%s\n' "$CAIRN_SMB_PASS" >"$pwfile") || die "cannot write $pwfile"
        elif [[ ! -s $pwfile ]]; then
            (umask 077 && printf 'Cairn-%s\n' "$(head -c 12 /dev/urandom | base64 | tr '+/' '-_')" >"$pwfile") ||
                die "cannot write $pwfile"
        fi
        chmod 600 "$pwfile" || die "chmod 600 $pwfile"
        pass=$(<"$pwfile")
        smb_ensure_user "$user" || die "cannot create the local SMB user $user"
        # the volume root belongs to root: let SMB users create files there
        chmod 0777 "$CAIRN_MNT" || die "chmod of the volume root at $CAIRN_MNT"
        smb_write_conf "$dir" "$port"
        smb_include_managed "$dir"
        smb_set_password "$dir" "$user" "$pass" || die "smbpasswd for $user"
        smb_start "$dir" "$LOG_DIR/smbd.log" || die "smbd did not start; see $LOG_DIR/smbd.log"
        log "smbd started on port $port"
    fi
    # Shares come from the config store (`cairn smb share`), rendered into
    # $dir/cairn/shares.conf by `cairn smb sync`.
    local -x CAIRN_SMB_CONF_DIR=$dir/cairn CAIRN_SMB_CONF=$dir/smb.conf
    if ! cairn_cli smb share show "$CAIRN_VOLUME" >/dev/null 2>&1; then
        cairn_cli smb share add "$CAIRN_VOLUME" --volume "$CAIRN_VOLUME" >>"$LOG_DIR/cairn-smb.log" 2>&1 ||
            die "cairn smb share add failed; see $LOG_DIR/cairn-smb.log"
    fi
    cairn_cli smb sync >>"$LOG_DIR/cairn-smb.log" 2>&1 ||
        die "cairn smb sync failed; see $LOG_DIR/cairn-smb.log and $LOG_DIR/smbd.log"
    SMB_SUMMARY="  smbd    pid $(cat "$dir/smbd.pid")  share //127.0.0.1/$CAIRN_VOLUME (vfs_cairn)  port $port  log $LOG_DIR/smbd.log
    smbclient //127.0.0.1/$CAIRN_VOLUME -p $port -s $dir/smb.conf -m SMB3 -U \"$user%\$(cat $pwfile)\"
          (the password of $user is in $pwfile, mode 0600)
          shares: CAIRN_SMB_CONF_DIR=$dir/cairn CAIRN_SMB_CONF=$dir/smb.conf cairn smb share list
"
}
# pNFS (docs/nfs.md "pNFS"): the gateway above is the MDS of a second export,
# /$CAIRN_VOLUME-pnfs, with $CAIRN_PNFS_LAYOUT layouts (files or flexfiles) whose devices
# name this node's DS: a Ganesha with FSAL_CAIRN in DS mode (NFSv4.1+ only, its own private
# bus) on 127.0.0.1:$CAIRN_NFS_DS_PORT, serving the bricks through this node's cairnd.
# CAIRN_PNFS=0 starts neither.
CAIRN_PNFS=${CAIRN_PNFS:-1}
CAIRN_PNFS_LAYOUT=${CAIRN_PNFS_LAYOUT:-files}
CAIRN_NFS_DS_PORT=${CAIRN_NFS_DS_PORT:-20490}
ensure_pnfs_export() {
    [[ $CAIRN_PNFS == 1 ]] || return 0
    cairn_cli nfs export show "/$CAIRN_VOLUME-pnfs" >/dev/null 2>&1 && return 0
    cairn_cli nfs export add "$CAIRN_VOLUME" --path "/$CAIRN_VOLUME-pnfs" --clients 127.0.0.1 \
        --squash no_root_squash --protocols 4 --pnfs "$CAIRN_PNFS_LAYOUT" \
        --ds-addrs "$CAIRN_NODE=127.0.0.1:$CAIRN_NFS_DS_PORT" >>"$LOG_DIR/cairn-nfs.log" 2>&1 ||
        die "cairn nfs export add /$CAIRN_VOLUME-pnfs failed; see $LOG_DIR/cairn-nfs.log"
}
start_nfs_ds() {
    local plugins=$1 dir=$CAIRN_RUN_DIR/nfs-ds show id
    [[ $CAIRN_PNFS == 1 ]] || return 0
    # the DS serves the MDS export's id: Ganesha finds the DS by the id in its handles
    show=$(cairn_cli nfs export show "/$CAIRN_VOLUME-pnfs") ||
        die "cairn nfs export show /$CAIRN_VOLUME-pnfs failed"
    id=$(awk -F': *' '$1 == "Export Id" { print $2 }' <<<"$show")
    [[ $id =~ ^[0-9]+$ ]] || die "no export id in 'cairn nfs export show /$CAIRN_VOLUME-pnfs'"
    if pidfile_alive "$dir/ganesha.pid.self" ganesha.nfsd; then
        log "the pNFS DS ganesha.nfsd already runs (pid $(cat "$dir/ganesha.pid.self"))"
    else
        port_in_use "$CAIRN_NFS_DS_PORT" &&
            die "port $CAIRN_NFS_DS_PORT is taken by another process (set CAIRN_NFS_DS_PORT, or CAIRN_PNFS=0)"
        mkdir -p "$dir"
        nfs_ds_export_block "$id" "$CAIRN_VOLUME" "$CAIRN_ADDR" "/$CAIRN_VOLUME-pnfs" 127.0.0.1 \
            >"$dir/ds.conf"
        nfs_render_ds_config "$dir" "$CAIRN_NFS_DS_PORT" "$dir/ds.conf" "$plugins"
        NFS_PRIVATE_BUS=1 nfs_start_ganesha "$dir" "$CAIRN_NFS_DS_PORT" ||
            die "the pNFS DS ganesha.nfsd did not start; see $dir/ganesha.log"
        log "started the pNFS DS ganesha.nfsd (pid $(cat "$dir/ganesha.pid.self"))"
    fi
    NFS_SUMMARY+="
  pnfs    MDS export /$CAIRN_VOLUME-pnfs ($CAIRN_PNFS_LAYOUT layouts, id $id); DS pid $(cat "$dir/ganesha.pid.self")  127.0.0.1:$CAIRN_NFS_DS_PORT  log $dir/ganesha.log
          mount -t nfs -o vers=4.2,port=$CAIRN_NFS_PORT 127.0.0.1:/$CAIRN_VOLUME-pnfs /mnt   (reads and writes go to the DS)"
}

# CAIRN_GATEWAYS=0: no NFS or SMB gateway (etcd, cairnd, the volume and its mount only).
start_gateways() {
    [[ ${CAIRN_GATEWAYS:-1} == 1 ]] || { log "CAIRN_GATEWAYS=0: no NFS or SMB gateway"; return 0; }
    start_nfs_ganesha
    start_smbd
}

print_summary() {
    cat <<MSG

Cairn runs on this host (all on 127.0.0.1; run dir $CAIRN_RUN_DIR):
  etcd    pid $(cat "$PID_DIR/etcd.pid")  client $CAIRN_ETCD_URL  peer port $CAIRN_ETCD_PEER_PORT  log $LOG_DIR/etcd.log
          $( [[ $CAIRN_ETCD_TLS == 1 ]] && echo "TLS, client certificates and auth (cairnd as etcd user cairn-$CAIRN_NODE): CA and keys in $CAIRN_ETCD_TLS_DIR (0600)" || echo "plain HTTP (CAIRN_ETCD_TLS=0)")
  cairnd  pid $(cat "$PID_DIR/cairnd-$CAIRN_NODE.pid")  node $CAIRN_NODE  $CAIRN_ADDR  log $LOG_DIR/cairnd-$CAIRN_NODE.log
  volume  $CAIRN_VOLUME (replica $CAIRN_REPLICA, $CAIRN_BRICKS bricks in $CAIRN_RUN_DIR/bricks)
  mount   $CAIRN_MNT  log $LOG_DIR/mount-$CAIRN_VOLUME.log
${NFS_SUMMARY:-  nfs     not running}

Try:
  ls $CAIRN_MNT
  cairn --host $CAIRN_ADDR volume info $CAIRN_VOLUME
  cairn --host $CAIRN_ADDR volume status $CAIRN_VOLUME
Stop with 'make down' (data in $CAIRN_RUN_DIR stays); 'make clean-run' deletes it.
MSG
    [[ -z ${SMB_SUMMARY:-} ]] || printf 'SMB gateway:\n%s' "$SMB_SUMMARY"
}

main() {
    mkdir -p "$PID_DIR" "$LOG_DIR"
    start_etcd
    start_cairnd
    ensure_volume
    ensure_mount
    start_gateways
    print_summary
}

main "$@"
