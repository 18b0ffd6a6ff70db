# shellcheck shell=bash
# GlusterFS side by side (sourced by tests/bench/run.sh): the system Cairn must beat,
# measured in the same run, on the same disk, with the same workloads.
#
#   gl_up DIR     start a private glusterd (working directory, socket and logs under DIR,
#                 listening on $BENCH_GLUSTER_ADDR only), create and start two volumes with
#                 Gluster's defaults, gl-rep (replica 2 over 2 sets, like Cairn's 2x2) and
#                 gl-dist (distribute over 4 bricks), and FUSE-mount them at DIR/mnt/rep and
#                 DIR/mnt/dist. Sets GL_REP and GL_DIST to the mount points. Returns 1 with a
#                 message if any step fails (the bench then reports without Gluster columns).
#   gl_down       unmount, stop and delete the volumes, stop glusterd and its bricks.
#
# GL_CLIENT_CMD (an array, set after sourcing; default empty) prefixes the FUSE client's
# command line: tests/bench/replication-net.sh runs it in a network namespace with
# GL_CLIENT_CMD=(nsenter --net=/run/netns/NAME).
# GL_BRICK_ROOTS (an array of 4 directories, set after sourcing; default empty = DIR/bricks)
# puts brick i of both volumes under the i-th one (as ROOT/gl-rep, ROOT/gl-dist):
# tests/bench/ramdisk.sh gives each its own RAM-backed file system.
#
# Gluster refuses 127.0.0.1 ("localhost") as a brick host, so glusterd and its bricks bind
# 127.0.0.2 (BENCH_GLUSTER_ADDR): still loopback. Bricks sit on the local disk, so gluster
# asks for `force`. Needs the Debian packages glusterfs-server and glusterfs-client (10.3 on
# Debian 12, the version issue 2's reference numbers were measured with); `make bench`
# installs them.

GL_ADDR=${BENCH_GLUSTER_ADDR:-127.0.0.2}
GL_DIR=
GL_REP=
GL_DIST=
GL_CLIENT_CMD=()
GL_BRICK_ROOTS=()

gl_cli() { gluster --glusterd-sock="$GL_DIR/run/glusterd.socket" --mode=script "$@"; }

gl_up() {
    GL_DIR=$1
    # GL_DIR is cleared again when gl_up returns before starting anything, so gl_down does
    # not go looking for gl-rep / gl-dist processes that belong to another run.
    command -v glusterd >/dev/null || { log "glusterd not installed (apt-get install glusterfs-server glusterfs-client): no Gluster columns"; GL_DIR=; return 1; }
    mkdir -p "$GL_DIR"/{wd,run,log,bricks,mnt/rep,mnt/dist}
    cat >"$GL_DIR/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $GL_DIR/wd
    option transport-type socket
    option transport.socket.bind-address $GL_ADDR
    option transport.socket.listen-port 24007
    option glusterd-sockfile $GL_DIR/run/glusterd.socket
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF
    # Gluster's bricks fetch their volfile from port 24007 whatever glusterd listens on, so
    # the port is fixed; a glusterd already there (a system one on *:24007) is not ours.
    if ss -Hltn 'sport = :24007' 2>/dev/null | grep -q .; then
        log "port 24007 is taken (a system glusterd, or another bench run's? systemctl stop glusterd): no Gluster columns"
        GL_DIR=
        return 1
    fi
    glusterd -f "$GL_DIR/glusterd.vol" -p "$GL_DIR/run/glusterd.pid" \
        -l "$GL_DIR/log/glusterd.log" --log-level=WARNING || { log "glusterd did not start (see $GL_DIR/log/glusterd.log)"; return 1; }
    wait_until 30 gl_cli peer status >/dev/null || { log "glusterd on $GL_ADDR not answering after 30s"; return 1; }
    local v i bricks
    for v in rep dist; do
        bricks=()
        for i in 1 2 3 4; do
            local b=$GL_DIR/bricks/$v$i
            ((${#GL_BRICK_ROOTS[@]})) && b=${GL_BRICK_ROOTS[i - 1]}/gl-$v
            mkdir -p "$b"
            bricks+=("$GL_ADDR:$b")
        done
        if [[ $v == rep ]]; then
            gl_cli volume create gl-rep replica 2 "${bricks[@]}" force >"$GL_DIR/log/create-$v.log" 2>&1
        else
            gl_cli volume create gl-dist "${bricks[@]}" force >"$GL_DIR/log/create-$v.log" 2>&1
        fi || { log "gluster volume create gl-$v failed: $(tail -1 "$GL_DIR/log/create-$v.log")"; return 1; }
        gl_cli volume start "gl-$v" >>"$GL_DIR/log/create-$v.log" 2>&1 ||
            { log "gluster volume start gl-$v failed: $(tail -1 "$GL_DIR/log/create-$v.log")"; return 1; }
        "${GL_CLIENT_CMD[@]}" glusterfs --volfile-server="$GL_ADDR" --volfile-id="gl-$v" \
            --log-file="$GL_DIR/log/mnt-$v.log" "$GL_DIR/mnt/$v" ||
            { log "glusterfs mount of gl-$v failed (see $GL_DIR/log/mnt-$v.log)"; return 1; }
        wait_until 30 mountpoint -q "$GL_DIR/mnt/$v" || { log "gl-$v not mounted after 30s"; return 1; }
    done
    GL_REP=$GL_DIR/mnt/rep
    GL_DIST=$GL_DIR/mnt/dist
    log "GlusterFS $(glusterfs --version | head -1 | awk '{print $2}') up on $GL_ADDR: gl-rep (2x2) at $GL_REP, gl-dist (4x1) at $GL_DIST"
}

gl_down() {
    [[ -n $GL_DIR && -d $GL_DIR ]] || return 0
    local v pid
    for v in rep dist; do
        mountpoint -q "$GL_DIR/mnt/$v" 2>/dev/null && { umount "$GL_DIR/mnt/$v" 2>/dev/null || umount -l "$GL_DIR/mnt/$v"; }
    done
    if [[ -S $GL_DIR/run/glusterd.socket ]]; then
        for v in rep dist; do
            gl_cli volume stop "gl-$v" force >/dev/null 2>&1
            gl_cli volume delete "gl-$v" >/dev/null 2>&1
        done
    fi
    [[ -f $GL_DIR/run/glusterd.pid ]] && kill "$(cat "$GL_DIR/run/glusterd.pid")" 2>/dev/null
    # Anything left that serves our bricks or volumes (self-heal daemon, a brick that
    # outlived `volume stop`): matched on this run's paths, never other glusters.
    for pid in $(pgrep -f "gluster.*($GL_DIR|gl-rep|gl-dist)" 2>/dev/null); do
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -e "$GL_DIR" -e "gl-rep" -e "gl-dist"; then
            kill "$pid" 2>/dev/null
        fi
    done
    sleep 1
    for pid in $(pgrep -f "gluster.*$GL_DIR" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    GL_DIR=
}
