#!/usr/bin/env python3
"""Share reservations through libcairn (ctypes) for the dead-gateway scenario.

    share.py hold  --lib L --servers S --volume V --name N   take deny both on N, then sleep
    share.py probe --lib L --servers S --volume V --name N --timeout T [--first denied]

`hold` acts as a gateway holding an NFSv4 open with deny both: it creates N in the
volume root (if missing), takes access read+write / deny read+write (owner 1), prints
"held" and sleeps until killed. `probe` asks for access read (owner 1) until granted:
exit 0 when granted within T seconds (printing how long it took), 1 if not; with
`--first denied` the first attempt must be refused (ESHAREDENIED), else exit 2.
"""

import argparse
import ctypes
import errno
import sys
import time

from workload import Cairn, Id

READ, WRITE = 1, 2


def open_lib(a):
    c = Cairn(a.lib)
    c.lib.cairn_share.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_uint64,
                                  ctypes.c_uint32, ctypes.c_uint32]
    fs = c.mount(a.servers, a.volume)
    return c, fs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["hold", "probe"])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--servers", required=True)
    ap.add_argument("--volume", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--first")
    a = ap.parse_args()
    c, fs = open_lib(a)
    if a.mode == "hold":
        try:
            f = c.lookup(fs, c.root, a.name)
        except OSError:
            f = c.create(fs, c.root, a.name)
        c.check(c.lib.cairn_share(fs, None, f, 1, READ | WRITE, READ | WRITE), "share")
        print("held", flush=True)
        while True:
            time.sleep(3600)
    f = c.lookup(fs, c.root, a.name)
    start = time.monotonic()
    first = True
    while True:
        r = c.lib.cairn_share(fs, None, f, 1, READ, 0)
        if first and a.first == "denied" and r != -errno.ETXTBSY:
            print(f"first attempt: {r} ({c.err()}), expected -ETXTBSY")
            return 2
        first = False
        if r == 0:
            print(f"granted after {time.monotonic() - start:.1f}s")
            return 0
        if r != -errno.ETXTBSY:
            print(f"share: {r} ({c.err()})")
            return 1
        if time.monotonic() - start > a.timeout:
            print(f"still denied after {a.timeout:.0f}s: {c.err()}")
            return 1
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
