#!/usr/bin/env bash
# Stop the single-host cluster (`make down`): unmount, stop cairnd, stop etcd. Leaves no
# mount and no process behind; the data in run/ stays.
set -euo pipefail
CAIRN_LOG_TAG=cluster-down
# shellcheck source=scripts/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# shellcheck source=scripts/cluster-env.sh
. "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"

# Gateway hooks, the counterparts of start_* in cluster-up.sh.
stop_nfs_ganesha() {
    local dir=$CAIRN_RUN_DIR/nfs
    [[ -f $dir/ganesha.pid.self || -f $dir/dbus.pid ]] || return 0
    # shellcheck source=scripts/nfs-ganesha.sh
    . "$CAIRN_REPO/scripts/nfs-ganesha.sh"
    nfs_stop_ganesha "$dir" || die "could not stop ganesha.nfsd (or its private dbus-daemon)"
    log "stopped ganesha.nfsd"
}
stop_nfs_ds() {
    local dir=$CAIRN_RUN_DIR/nfs-ds
    [[ -f $dir/ganesha.pid.self || -f $dir/dbus.pid ]] || return 0
    # shellcheck source=scripts/nfs-ganesha.sh
    . "$CAIRN_REPO/scripts/nfs-ganesha.sh"
    nfs_stop_ganesha "$dir" || die "could not stop the pNFS DS ganesha.nfsd (or its dbus-daemon)"
    log "stopped the pNFS DS ganesha.nfsd"
}
stop_smbd() {
    local dir=$CAIRN_RUN_DIR/smb
    [[ -f $dir/smbd.pid ]] || return 0
    # shellcheck source=scripts/smb.sh
    . "$CAIRN_REPO/scripts/smb.sh"
    smb_stop "$dir"
    log "stopped smbd"
}
stop_gateways() {
    stop_smbd
    stop_nfs_ganesha
    stop_nfs_ds
}

unmount_all() {
    local dir
    [[ -d $CAIRN_RUN_DIR/mnt ]] || return 0
    for dir in "$CAIRN_RUN_DIR"/mnt/*/; do
        dir=${dir%/}
        [[ -d $dir ]] || continue
        if is_mounted "$dir" || [[ -n $(fuse_pids "$dir") ]]; then
            unmount_fuse "$dir" || die "could not unmount $dir"
            log "unmounted $dir"
        fi
    done
}

stop_cairnds() {
    local pidfile name
    for pidfile in "$PID_DIR"/cairnd-*.pid; do
        [[ -f $pidfile ]] || continue
        name=$(basename "$pidfile" .pid)
        if pidfile_alive "$pidfile" cairnd; then
            stop_pidfile "$pidfile" cairnd 10 || die "could not stop $name"
            log "stopped $name"
        else
            rm -f "$pidfile"
        fi
    done
}

stop_etcd() {
    if pidfile_alive "$PID_DIR/etcd.pid" etcd; then
        stop_pidfile "$PID_DIR/etcd.pid" etcd 10 || die "could not stop etcd"
        log "stopped etcd"
    else
        rm -f "$PID_DIR/etcd.pid"
    fi
}

main() {
    stop_gateways
    unmount_all
    stop_cairnds
    stop_etcd
    log "cluster stopped; data stays in $CAIRN_RUN_DIR"
}

main "$@"
