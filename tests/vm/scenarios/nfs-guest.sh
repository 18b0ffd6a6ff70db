#!/bin/bash
# Guest side of scenario nfs: mount the host's Ganesha (FSAL_CAIRN) with one NFS version
# and run a short write / read / rename / lock check. Runs as root in the guest:
#
#   nfs-guest.sh mount VERS PORT MNT_PORT      mount 10.0.2.2:/vol0 on /mnt/nfs-VERS
#   nfs-guest.sh check VERS                    write, read back (cold cache), rename,
#                                              flock and fcntl locks between two processes
#   nfs-guest.sh v42ops VERS                   NFSv4.2: ALLOCATE (fallocate), DEALLOCATE
#                                              (punch hole), SEEK (SEEK_DATA/SEEK_HOLE),
#                                              xattrs (user.*); leaves vm-VERS/sparse
#   nfs-guest.sh cat VERS PATH                 print a file (a fresh open: close-to-open)
#   nfs-guest.sh lock-expect VERS PATH START LEN denied|granted
#                                              try a non-blocking fcntl write lock
#   nfs-guest.sh hold VERS PATH START LEN      hold a write lock in the background until
#                                              `release`; prints when it is held
#   nfs-guest.sh release VERS                  drop the held lock
#   nfs-guest.sh umount VERS
#
# Everything it writes is small (a 256 KiB file): TCG guests are slow.
set -euo pipefail

say() { echo "guest: $*"; }
die() {
    echo "guest FAIL: $*" >&2
    exit 1
}

cmd=$1 vers=$2
mnt=/mnt/nfs-$vers
dir=$mnt/vm-$vers

# lockf.py PATH START LEN: non-blocking exclusive fcntl lock; exit 0 granted, 11 denied.
lock_try() {
    python3 - "$@" <<'PY'
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))
except OSError as e:
    if e.errno in (errno.EAGAIN, errno.EACCES):
        sys.exit(11)
    print(f"lockf {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(1)
sys.exit(0)
PY
}

case $cmd in
mount)
    port=$3 mnt_port=$4
    mkdir -p "$mnt"
    opts="vers=$vers,proto=tcp,port=$port,hard,timeo=100,retrans=3"
    # NFSv3: MOUNT on its fixed port; NLM (locks) found through the host's rpcbind
    [[ $vers == 3 ]] && opts+=",mountport=$mnt_port,mountproto=tcp"
    mount -t nfs -o "$opts" 10.0.2.2:/vol0 "$mnt" || die "mount -o $opts"
    grep " $mnt " /proc/mounts | sed 's/^/guest: /'
    ;;
check)
    mkdir -p "$dir"
    # write, then read back with a cold page cache (the data comes from the server)
    head -c 262144 /dev/urandom >"/tmp/blob-$vers"
    cp "/tmp/blob-$vers" "$dir/blob"
    echo "hello from the guest over NFSv$vers" >"$dir/hello"
    sync
    echo 3 >/proc/sys/vm/drop_caches
    cmp "/tmp/blob-$vers" "$dir/blob" || die "256 KiB read back differs"
    [[ $(cat "$dir/hello") == "hello from the guest over NFSv$vers" ]] || die "hello read back"
    md5sum <"/tmp/blob-$vers" | cut -d' ' -f1 >"$dir/blob.md5"
    say "v$vers: wrote and read back 256 KiB (cold cache)"
    # rename, over an existing name too
    echo old >"$dir/victim"
    mv "$dir/hello" "$dir/hello.renamed"
    mv "$dir/blob.md5" "$dir/victim"
    [[ ! -e $dir/hello && -f $dir/hello.renamed ]] || die "rename: old name still there"
    [[ $(cat "$dir/victim") == $(md5sum <"/tmp/blob-$vers" | cut -d' ' -f1) ]] ||
        die "rename over an existing file"
    say "v$vers: rename (and rename over an existing name)"
    # flock: a second open file description cannot take the lock while the first holds it
    : >"$dir/flocked"
    flock -n -x "$dir/flocked" -c "flock -n -x '$dir/flocked' true" &&
        die "flock: a second exclusive flock was granted"
    flock -n -x "$dir/flocked" true || die "flock not granted after release"
    say "v$vers: flock conflict between two processes, granted after release"
    # fcntl byte ranges: the holder has 0..99; 50..149 is refused, 200..299 granted
    : >"$dir/ranges"
    python3 - "$dir/ranges" <<'PY' || die "fcntl byte-range locks"
import errno, fcntl, os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    cfd = os.open(path, os.O_RDWR)
    res = []
    for start in (50, 200):
        try:
            fcntl.lockf(cfd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, start)
            res.append("granted")
            fcntl.lockf(cfd, fcntl.LOCK_UN, 100, start)
        except OSError as e:
            res.append("denied" if e.errno in (errno.EAGAIN, errno.EACCES) else str(e))
    os.write(w, " ".join(res).encode())
    os._exit(0)
os.waitpid(pid, 0)
got = os.read(r, 100).decode()
if got != "denied granted":
    sys.exit(f"child: overlapping/disjoint range: {got} (expected: denied granted)")
fcntl.lockf(fd, fcntl.LOCK_UN, 100, 0)
if os.fork() == 0:
    cfd = os.open(path, os.O_RDWR)
    fcntl.lockf(cfd, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 50)
    os._exit(0)
_, st = os.wait()
if st != 0:
    sys.exit("range 50..149 not granted after the holder unlocked")
PY
    say "v$vers: fcntl ranges: overlap denied, disjoint granted, granted after unlock"
    ;;
v42ops)
    python3 - "$dir/sparse" <<'PY' || die "NFSv4.2 operations"
import os, sys
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
# ALLOCATE: 1 MiB, size follows
os.posix_fallocate(fd, 0, 1 << 20)
assert os.fstat(fd).st_size == 1 << 20, f"size after fallocate {os.fstat(fd).st_size}"
os.pwrite(fd, b"\xab" * 65536, 0)
os.pwrite(fd, b"\xcd" * 65536, 512 << 10)
os.fsync(fd)
# DEALLOCATE: punch 64 KiB at 512 KiB (keep size); reads back as zeroes
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE, 512 << 10, 65536) != 0:
    raise OSError(ctypes.get_errno(), "fallocate(PUNCH_HOLE)")
os.close(fd)
os.system("echo 3 >/proc/sys/vm/drop_caches")
fd = os.open(path, os.O_RDONLY)
assert os.fstat(fd).st_size == 1 << 20, "punch hole changed the size"
assert os.pread(fd, 65536, 512 << 10) == bytes(65536), "punched range is not zeroes"
assert os.pread(fd, 65536, 0) == b"\xab" * 65536, "data before the hole changed"
# SEEK: data at 0, a hole at the punched range or later, data again after it
assert os.lseek(fd, 0, os.SEEK_DATA) == 0
hole = os.lseek(fd, 0, os.SEEK_HOLE)
assert 0 < hole <= 1 << 20, f"SEEK_HOLE {hole}"
os.close(fd)
# xattrs (user. namespace)
os.setxattr(path, "user.cairn", b"from the guest")
assert os.getxattr(path, "user.cairn") == b"from the guest"
assert "user.cairn" in os.listxattr(path)
os.setxattr(path, "user.gone", b"x")
os.removexattr(path, "user.gone")
assert "user.gone" not in os.listxattr(path)
print(f"guest: v4.2: allocate 1 MiB, punch 64 KiB (zeroes), SEEK_DATA 0 / SEEK_HOLE {hole}, xattrs")
PY
    ;;
cat)
    cat "$mnt/$3"
    ;;
lock-expect)
    rc=0
    lock_try "$mnt/$3" "$4" "$5" || rc=$?
    case $6:$rc in
    denied:11 | granted:0) say "v$vers: lock $3 [$4,+$5) $6 as expected" ;;
    *) die "lock $3 [$4,+$5): expected $6, exit $rc" ;;
    esac
    ;;
hold)
    rm -f "/tmp/held-$vers"
    nohup python3 - "$mnt/$3" "$4" "$5" "/tmp/held-$vers" >"/tmp/hold-$vers.log" 2>&1 <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, int(sys.argv[3]), int(sys.argv[2]))
open(sys.argv[4], "w").write(str(os.getpid()))
time.sleep(300)
PY
    for _ in $(seq 50); do
        [[ -s "/tmp/held-$vers" ]] && break
        sleep 0.2
    done
    [[ -s "/tmp/held-$vers" ]] || die "hold: lock not taken: $(cat "/tmp/hold-$vers.log")"
    say "v$vers: holding a write lock on $3 [$4,+$5) (pid $(cat "/tmp/held-$vers"))"
    ;;
release)
    pid=$(cat "/tmp/held-$vers")
    kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    say "v$vers: released"
    ;;
umount)
    umount "$mnt" || die "umount $mnt"
    ;;
*) die "unknown command $cmd" ;;
esac
