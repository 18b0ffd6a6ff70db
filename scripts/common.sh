# shellcheck shell=bash
# Helpers shared by scripts/cluster-*.sh and tests/integration/lib.sh.
# Source it; it sets no shell options and starts nothing by itself.

# Print to stderr with the calling script's name.
log() { printf '%s: %s\n' "${CAIRN_LOG_TAG:-cairn}" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# wait_port HOST PORT [TIMEOUT_SECONDS]: wait until a TCP connect to HOST:PORT succeeds.
wait_port() {
    local host=$1 port=$2 timeout=${3:-30} i
    for ((i = 0; i < timeout * 10; i++)); do
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "nothing listens on $host:$port after ${timeout}s"
    return 1
}

# wait_port_pid HOST PORT PID [TIMEOUT]: like wait_port, but give up at once when PID (the
# process that should open the port) has exited.
wait_port_pid() {
    local host=$1 port=$2 pid=$3 timeout=${4:-30} i
    for ((i = 0; i < timeout * 10; i++)); do
        if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
            return 0
        fi
        if ! pid_alive "$pid"; then
            log "pid $pid exited before listening on $host:$port"
            return 1
        fi
        sleep 0.1
    done
    log "nothing listens on $host:$port after ${timeout}s"
    return 1
}

# wait_mount DIR PID [TIMEOUT]: wait until DIR is a mount point that answers. PID is the
# mount helper: it may daemonize (exit once mounted), so its exit only counts as failure
# when the mount has not appeared 2 s later.
wait_mount() {
    local dir=$1 pid=$2 timeout=${3:-30} i dead=0
    for ((i = 0; i < timeout * 10; i++)); do
        if is_mounted "$dir" && stat -t "$dir" >/dev/null 2>&1; then
            return 0
        fi
        if ! pid_alive "$pid"; then
            dead=$((dead + 1))
            if ((dead > 20)); then
                log "mount helper (pid $pid) exited and $dir is not mounted"
                return 1
            fi
        fi
        sleep 0.1
    done
    log "$dir not mounted (or not answering) after ${timeout}s"
    return 1
}

# port_in_use PORT: true if something on 127.0.0.1 accepts connections on PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port: print a TCP port on 127.0.0.1 that nothing listens on right now and that no
# other free_port call handed out in the last 10 minutes (a suite asks for several ports
# before it starts the servers that bind them: the kernel's bind(0) could return the same
# port twice). Ports come from below the ephemeral range, so the outgoing connections of
# other tests cannot take them before their server binds; handed-out ports are recorded
# (with a lock) in ${TMPDIR:-/tmp}/cairn-free-ports.
free_port() {
    python3 -c 'import fcntl, os, random, socket, time
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cairn-free-ports")
now = time.time()
with open(path, "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    recent = {}
    for line in f:
        try:
            port, when = line.split()
            if now - float(when) < 600:
                recent[int(port)] = float(when)
        except ValueError:
            pass
    for _ in range(1000):
        port = random.randint(10000, 32000)
        if port in recent:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        break
    else:
        raise SystemExit("free_port: no free port in 10000-32000")
    recent[port] = now
    f.seek(0)
    f.truncate()
    f.writelines(f"{p} {w}\n" for p, w in recent.items())
print(port)'
}

# wait_until TIMEOUT_SECONDS CMD...: run CMD every 0.2 s until it succeeds.
wait_until() {
    local timeout=$1 i
    shift
    for ((i = 0; i < timeout * 5; i++)); do
        if "$@"; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# pid_alive PID [NAME]: PID runs (and, if NAME is given, its command line contains NAME,
# which guards against a recycled pid).
pid_alive() {
    local pid=$1 name=${2:-}
    [[ -n $pid && -d /proc/$pid ]] || return 1
    # A zombie is not alive for our purposes.
    if [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]]; then
        return 1
    fi
    if [[ -n $name ]]; then
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$name" || return 1
    fi
    return 0
}

# pid_gone PID [NAME]: the opposite of pid_alive.
pid_gone() { ! pid_alive "$@"; }

# pidfile_alive FILE [NAME]: the pid in FILE runs.
pidfile_alive() {
    local file=$1 name=${2:-}
    [[ -f $file ]] && pid_alive "$(cat "$file")" "$name"
}

# stop_pid PID NAME [GRACE_SECONDS]: SIGTERM, wait up to GRACE (10 s), then SIGKILL.
stop_pid() {
    local pid=$1 name=$2 grace=${3:-10} i
    pid_alive "$pid" "$name" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    log "$name (pid $pid) still runs ${grace}s after SIGTERM: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    log "$name (pid $pid) survived SIGKILL"
    return 1
}

# stop_pidfile FILE NAME [GRACE]: stop_pid on the pid in FILE, then remove FILE.
stop_pidfile() {
    local file=$1 name=$2 grace=${3:-10}
    [[ -f $file ]] || return 0
    stop_pid "$(cat "$file")" "$name" "$grace" || return 1
    rm -f "$file"
}

# is_mounted DIR: DIR is a mount point (a dead FUSE mount counts: it still needs unmounting).
is_mounted() {
    local dir
    dir=$(realpath -m "$1")
    awk -v d="$dir" '$2 == d { found = 1 } END { exit !found }' /proc/self/mounts
}

# fuse_pids DIR: pids of FUSE daemons (mount-cairn / mount.cairn) serving DIR.
fuse_pids() {
    local dir pid
    dir=$(realpath -m "$1")
    for pid in /proc/[0-9]*; do
        pid=${pid#/proc/}
        tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qx -- "$dir" || continue
        tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qE 'mount[-.]cairn' || continue
        echo "$pid"
    done
}

# unmount_fuse DIR: unmount DIR (fusermount3 -u, lazily if busy) and wait for its FUSE
# daemon to exit (SIGTERM, then SIGKILL after 10 s).
unmount_fuse() {
    local dir=$1 pids pid
    pids=$(fuse_pids "$dir")
    if is_mounted "$dir"; then
        if ! fusermount3 -u "$dir" 2>/dev/null && ! umount "$dir" 2>/dev/null; then
            log "$dir is busy: unmounting lazily"
            fusermount3 -uz "$dir" 2>/dev/null || umount -l "$dir"
        fi
    fi
    for pid in $pids; do
        # The daemon exits by itself once the kernel drops the mount; give it a moment.
        wait_until 5 pid_gone "$pid" mount || stop_pid "$pid" mount 10
    done
    ! is_mounted "$dir"
}

# etcd_healthy URL: etcd at URL answers /health with health true.
etcd_healthy() {
    curl -fsS --max-time 2 "$1/health" 2>/dev/null | grep -q '"health":"true"'
}

# volume_status JSON NAME: print the status of volume NAME from `cairn volume info --json`
# output on stdin ("absent" if it is not there). Accepts a list of volume maps, a single
# map, or an object with a "volumes" list.
volume_status() {
    python3 -c '
import json, sys
name = sys.argv[1]
doc = json.load(sys.stdin)
if isinstance(doc, dict):
    doc = doc.get("volumes", doc.get("Volumes", [doc]))
for v in doc:
    if isinstance(v, dict) and v.get("name") == name:
        print(v.get("status", "unknown"))
        break
else:
    print("absent")
' "$1"
}
