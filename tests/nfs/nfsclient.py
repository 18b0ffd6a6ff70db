#!/usr/bin/env python3
"""Userspace NFS client for the tests (nfs-rs from PyPI; NFSv3, v4.0, v4.1).

    nfsclient.py --port P --mount-port M --version 4.1 --export /vol0 [--uid U --gid G] CMD ARGS...

Commands print results on stdout and exit 1 with the error on stderr:
  write PATH TEXT        create/truncate PATH and write TEXT
  append PATH TEXT       write TEXT at the end of PATH
  read PATH              print the content
  read-at PATH OFF N     read N bytes at offset OFF; print how many came back
  stat PATH              print "type mode size uid gid nlink"
  mkdir PATH | rmdir PATH | unlink PATH | rename SRC DST | link SRC DST
  symlink TARGET PATH | readlink PATH | chmod PATH OCTAL | truncate PATH SIZE
  utime PATH SECONDS     set atime and mtime
  ls PATH                print the names, one a line
  mkfiles DIR N          create N empty files DIR/f00000..
  count DIR              print the number of entries (paged readdir)
  fh DIR NAME            print the hex file handle of DIR/NAME
  statfh DIR HEXFH       stat through a saved handle (readdir of a directory handle)
  fsstat                 print "total free files"
  expect-error CMD ...   succeed only if CMD fails; print the error class
"""

import argparse
import sys

import nfs_rs


def connect(a):
    url = f"nfs://127.0.0.1:{a.port}{a.export}"
    kw = {"versions": [a.version], "uid": a.uid, "gid": a.gid,
          "connect_timeout": 10.0, "operation_timeout": 30.0}
    if a.version == "3":
        kw["nfs_port"] = a.port
        kw["mount_port"] = a.mount_port
        url = f"nfs://127.0.0.1{a.export}"
    return nfs_rs.Client.connect(url, **kw)


def run(c, cmd, args):
    if cmd == "write":
        with c.open(args[0], "wb") as f:
            f.write(args[1].encode())
    elif cmd == "append":
        with c.open(args[0], "ab") as f:
            f.write(args[1].encode())
    elif cmd == "read":
        with c.open(args[0], "rb") as f:
            sys.stdout.write(f.read().decode())
    elif cmd == "read-at":
        with c.open(args[0], "rb") as f:
            print(len(f.read_at(int(args[1]), int(args[2]))))
    elif cmd == "stat":
        i = c.stat(args[0])
        print(i.type.value, oct(i.mode & 0o7777), i.size, i.uid, i.gid, i.nlink)
    elif cmd == "mkdir":
        c.mkdir(args[0], 0o755)
    elif cmd == "rmdir":
        c.rmdir(args[0])
    elif cmd == "unlink":
        c.unlink(args[0])
    elif cmd == "rename":
        c.rename(args[0], args[1])
    elif cmd == "link":
        c.link(args[0], args[1])
    elif cmd == "symlink":
        c.symlink(args[0], args[1])
    elif cmd == "readlink":
        print(c.readlink(args[0]))
    elif cmd == "chmod":
        c.chmod(args[0], int(args[1], 8))
    elif cmd == "truncate":
        c.truncate(args[0], int(args[1]))
    elif cmd == "utime":
        ns = int(args[1]) * 1_000_000_000
        c.utime(args[0], ns=(ns, ns))
    elif cmd == "ls":
        for n in sorted(c.listdir(args[0])):
            print(n)
    elif cmd == "mkfiles":
        for i in range(int(args[1])):
            c.touch(f"{args[0]}/f{i:05d}")
    elif cmd == "count":
        n, seen, pos = 0, set(), None
        while True:
            page = c.scandir_page(args[0], pos)
            for e in page.entries:
                if e.name in seen:
                    raise SystemExit(f"duplicate entry {e.name} in readdir")
                seen.add(e.name)
            n += len(page.entries)
            if page.eof:
                break
            pos = page.next
        print(n)
    elif cmd == "fh":
        for e in (c.scandir() if args[0] == "/" else c.scandir(args[0])):
            if e.name == args[1]:
                print(e.fh.hex())
                return
        raise SystemExit(f"{args[1]} not found in {args[0]}")
    elif cmd == "statfh":
        ref = nfs_rs.DirectoryRef(path=args[0], fh=bytes.fromhex(args[1]))
        page = c.scandir_page(ref)
        print(len(page.entries), " ".join(sorted(e.name for e in page.entries)))
    elif cmd == "fsstat":
        s = c.fs_stat()
        print(s.total_bytes, s.free_bytes, s.total_files)
    elif cmd == "expect-error":
        try:
            run(c, args[0], args[1:])
        except nfs_rs.NfsError as e:
            print(type(e).__name__)
            return
        raise SystemExit(f"{args[0]} {args[1:]} succeeded but should have failed")
    else:
        raise SystemExit(f"unknown command {cmd}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mount-port", type=int, default=0)
    p.add_argument("--version", default="4.1")
    p.add_argument("--export", default="/vol0")
    p.add_argument("--uid", type=int, default=0, help="AUTH_SYS uid (default 0)")
    p.add_argument("--gid", type=int, default=0, help="AUTH_SYS gid (default 0)")
    p.add_argument("cmd")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    try:
        with connect(a) as c:
            run(c, a.cmd, a.args)
    except nfs_rs.NfsError as e:
        print(f"nfsclient {a.cmd} {a.args} (NFS {a.version}): {type(e).__name__}: {e}",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
