#!/usr/bin/env python3
"""One client's sequential write then read of a file through an NFSv4.1 MDS (--mode mds:
READ and WRITE at the MDS) or through pNFS (--mode pnfs: LAYOUTGET RW with FILES layouts,
WRITE, COMMIT and READ at the data server the device names, LAYOUTCOMMIT at the MDS), in
--chunk KiB requests, one at a time. Prints one JSON line: mode, MiB, write_mibs (WRITEs
and the COMMIT), read_mibs. Used by tests/bench/pnfs-bypass.sh; the raw clients are
tests/nfs/nfs4deleg.py's (they destroy their client IDs when done).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nfs"))
import nfs4deleg  # noqa: E402
from nfs4deleg import Client  # noqa: E402
from pnfs import decode_ds_addr, decode_file_layout  # noqa: E402
from pnfs_state import (ALL, IOMODE_RW, LAYOUT4_NFSV4_1_FILES, close, getdeviceinfo,  # noqa: E402
                        layoutget, layoutreturn, open_file)
from xdr import Packer as P  # noqa: E402

nfs4deleg.OP.update({"COMMIT": 5, "LAYOUTCOMMIT": 49})


def commit(c, fh):
    c.compound([("PUTFH", P().opaque(fh), None), ("COMMIT", P().u64(0).u32(0), None)])


def layoutcommit(c, fh, lsd, last):
    p = P().u64(0).u64(ALL).u32(0).fixed(lsd).u32(1).u64(last).u32(0)
    p.u32(LAYOUT4_NFSV4_1_FILES).opaque(b"")
    c.compound([("PUTFH", P().opaque(fh), None), ("LAYOUTCOMMIT", p, None)])


def run(args):
    mds = Client(args.port, args.export, f"bypass-{args.mode}-{os.getpid()}", host=args.host)
    fh, osd = open_file(mds, f"bypass-{args.mode}-{os.getpid()}")
    io, iofh, sd, lsd = mds, fh, osd, None
    if args.mode == "pnfs":
        lsd, bodies = layoutget(mds, fh, osd, LAYOUT4_NFSV4_1_FILES, IOMODE_RW)
        lo = decode_file_layout(bodies[0])
        _, host, port = decode_ds_addr(getdeviceinfo(mds, lo["deviceid"],
                                                     LAYOUT4_NFSV4_1_FILES))["multipath_ds_list"][0][0]
        io, iofh, sd = Client(port, "", f"bypass-ds-{os.getpid()}", host=host), lo["fh_list"][0], lsd
    chunk = args.chunk << 10
    data = os.urandom(chunk)
    total = args.mib << 20
    t = time.monotonic()
    for off in range(0, total, chunk):
        if io.write(iofh, sd, data, offset=off) != chunk:
            raise RuntimeError(f"short WRITE at {off}")
    commit(io, iofh)
    if lsd is not None:
        layoutcommit(mds, fh, lsd, total - 1)
    wt = time.monotonic() - t
    t = time.monotonic()
    got = 0
    while got < total:
        n = len(io.read(iofh, sd, offset=got, count=chunk))
        if n == 0:
            raise RuntimeError(f"READ at {got}: end of file before {total}")
        got += n
    rt = time.monotonic() - t
    if lsd is not None:
        layoutreturn(mds, fh, lsd, LAYOUT4_NFSV4_1_FILES)
        io.destroy()
    close(mds, fh, osd)
    mds.destroy()
    print(json.dumps({"mode": args.mode, "mib": args.mib, "chunk_kib": args.chunk,
                      "write_mibs": round(args.mib / wt, 1), "read_mibs": round(args.mib / rt, 1)}),
          flush=True)


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--host", required=True)
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--export", required=True)
    a.add_argument("--mode", choices=("mds", "pnfs"), required=True)
    a.add_argument("--mib", type=int, default=64)
    a.add_argument("--chunk", type=int, default=256, help="KiB per READ or WRITE")
    run(a.parse_args())


if __name__ == "__main__":
    main()
