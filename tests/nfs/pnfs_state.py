#!/usr/bin/env python3
"""pNFS layout state at the MDS over time (tests/nfs/pnfs-state.sh): layout stateids used
again, Flexible Files error reports, clients that go away, and layout recalls.

A raw NFSv4.1 client with a back channel (nfs4deleg.Client), so the MDS can send it
CB_LAYOUTRECALL. Subcommands:

  reuse N      on N new files: OPEN, LAYOUTGET RW with the open stateid, then LAYOUTGET
               READ, RW, READ with the layout stateid (what a Linux Flexible Files client
               does after a data server failed), then LAYOUTRETURN (with --flexfiles an
               ff_layoutreturn4 reporting the I/O error, RFC 8435 §9.3) and CLOSE; with
               --go-away the client instead disconnects holding its opens and layouts
               (its lease expires at the MDS), after a LAYOUTERROR (--flexfiles).
  probe        one LAYOUTGET on a new file: the MDS still works.
  layout PATH  OPEN PATH (created), LAYOUTGET (--iomode), GETDEVICEINFO of each device
               it names; prints `layout PORT,...` (the DS ports, FILES: the multipath
               list, Flexible Files: one per mirror) and `devices HEX,...` (their ids), or
               `error NFS4ERR_...`, then returns it and closes.
  device HEX   GETDEVICEINFO of a device id: prints `device PORT,...` or `error ...`.
  io PATH      OPEN PATH (created), LAYOUTGET RW, GETDEVICEINFO, then WRITE and READ back
               --size bytes at the DS the device names (its address as given): prints
               `ds HOST:PORT` and PASS/FAIL lines.
  report PATH  OPEN PATH (created), LAYOUTGET RW (Flexible Files), LAYOUTRETURN with an
               ff_ioerr4 of its head's device: prints `reported PORT`.
  hold PATH    OPEN PATH (created), LAYOUTGET RW, then wait for a
               CB_LAYOUTRECALL: prints `ready`, then `recalled T KIND IOMODE` (seconds since
               ready), answers it with LAYOUTRETURN and prints `returned T`, or
               `no-recall` after --timeout seconds (and returns it); then CLOSE and
               DESTROY_SESSION, DESTROY_CLIENTID.

Prints PASS/FAIL lines and a last line "N passed, M failed" (reuse, probe); exit 1 on any
failure.
"""

import argparse
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nfs4deleg  # noqa: E402
from nfs4deleg import Client, Nfs4Error, stateid  # noqa: E402
from xdr import Packer as P  # noqa: E402
from pnfs import (decode_ds_addr, decode_ff_device, decode_ff_layout,  # noqa: E402
                  decode_file_layout)

nfs4deleg.OP.update({"GETDEVICEINFO": 47, "LAYOUTGET": 50, "LAYOUTRETURN": 51,
                     "LAYOUTERROR": 64})
LAYOUT4_NFSV4_1_FILES, LAYOUT4_FLEX_FILES = 1, 4
IOMODE_READ, IOMODE_RW, IOMODE_ANY = 1, 2, 3
ALL = 0xFFFFFFFFFFFFFFFF
NFS4ERR_NXIO, OP_WRITE = 6, 38
ERR_NAMES = {10058: "NFS4ERR_LAYOUTTRYLATER", 10059: "NFS4ERR_LAYOUTUNAVAILABLE"}
WANT_NO_DELEG = 0x0400

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)


def open_file(c, name):
    """OPEN name (created) for read and write, asking for no delegation: (fh, stateid)."""
    p = P().u32(0).u32(3 | WANT_NO_DELEG).u32(0)
    p.u64(0).opaque(f"{c.name}-open-{os.urandom(4).hex()}")
    p.u32(1).u32(0).u32(2).u32(0).u32(1 << 1).opaque(struct.pack(">I", 0o644))
    p.u32(0).opaque(name)
    ops = c._path_ops("") + [("OPEN", p, nfs4deleg._parse_open),
                             ("GETFH", None, lambda u: u.opaque())]
    res = c.compound_retry(ops)
    return res[-1], res[-2][0]


def layoutget(c, fh, sd, ltype, iomode=IOMODE_RW):
    p = P().u32(0).u32(ltype).u32(iomode).u64(0).u64(ALL).u64(0).fixed(sd).u32(8192)

    def parse(u):
        u.u32()  # return on close
        sid = stateid(u)
        devs = []
        for _ in range(u.u32()):
            u.u64()
            u.u64()
            u.u32()
            u.u32()
            devs.append(u.opaque())
        return sid, devs
    return c.compound([("PUTFH", P().opaque(fh), None), ("LAYOUTGET", p, parse)])[-1]


def ff_first_device(body):
    """The device id of the first mirror's first data server of an ff_layout4."""
    return body[8 + 4 + 4:8 + 4 + 4 + 16]


def layouterror(c, fh, sd, devid):
    """LAYOUTERROR (RFC 7862 §15.6): the DS answered WRITE with NFS4ERR_NXIO."""
    p = P().u64(0).u64(ALL).fixed(sd).u32(1).fixed(devid).u32(NFS4ERR_NXIO).u32(OP_WRITE)
    c.compound([("PUTFH", P().opaque(fh), None), ("LAYOUTERROR", p, None)])


def ff_layoutreturn_body(sd, devid):
    """ff_layoutreturn4 (RFC 8435 §9.3): one ff_ioerr4 (the DS failed a WRITE), no
    statistics."""
    b = P().u32(1).u64(0).u64(ALL).fixed(sd)
    b.u32(1).fixed(devid).u32(NFS4ERR_NXIO).u32(OP_WRITE)
    b.u32(0)
    return bytes(b.b)


def layoutreturn(c, fh, sd, ltype, body=b""):
    p = P().u32(0).u32(ltype).u32(IOMODE_ANY).u32(1).u64(0).u64(ALL).fixed(sd).opaque(body)
    c.compound([("PUTFH", P().opaque(fh), None), ("LAYOUTRETURN", p, None)])


def close(c, fh, sd):
    c.compound([("PUTFH", P().opaque(fh), None), ("CLOSE", P().u32(0).fixed(sd), None)])


def reuse(args):
    # NFSv4.2: LAYOUTERROR is a 4.2 operation (RFC 7862)
    c = Client(args.port, args.export, f"reuse-{os.getpid()}", minor=2)
    ltype = LAYOUT4_FLEX_FILES if args.flexfiles else LAYOUT4_NFSV4_1_FILES
    for i in range(args.n):
        name = f"{args.prefix}{i}"
        fh, osd = open_file(c, name)
        lsd, bodies = layoutget(c, fh, osd, ltype)
        what = f"{name}: LAYOUTGET RW with the open stateid"
        check(len(bodies) == 1, what)
        seqids = [lsd[:4]]
        for mode in (IOMODE_READ, IOMODE_RW, IOMODE_READ):
            lsd, _ = layoutget(c, fh, lsd, ltype, mode)
            seqids.append(lsd[:4])
        check(len(set(seqids)) == len(seqids),
              f"{name}: LAYOUTGET READ, RW, READ with the layout stateid (seqid moves each "
              f"time: {[int.from_bytes(s, 'big') for s in seqids]})")
        if args.flexfiles and not args.go_away:
            devid = ff_first_device(bodies[0])
            layoutreturn(c, fh, lsd, ltype, ff_layoutreturn_body(lsd, devid))
            check(True, f"{name}: LAYOUTRETURN with an ff_ioerr4 report")
        elif not args.go_away:
            layoutreturn(c, fh, lsd, ltype)
            check(True, f"{name}: LAYOUTRETURN")
        if not args.go_away:
            close(c, fh, osd)
        elif args.flexfiles and i == args.n - 1:
            # the last one also reports the DS's error with LAYOUTERROR; Ganesha 4.3
            # answers it without setting the reply's op (nfs4_op_layouterror) and drops
            # the connection when the reply does not encode (docs/nfs.md "pNFS")
            try:
                layouterror(c, fh, lsd, ff_first_device(bodies[0]))
                print(f"{name}: LAYOUTERROR answered", flush=True)
            except ConnectionError:
                print(f"{name}: LAYOUTERROR: the MDS closed the connection", flush=True)
    if args.go_away:
        print("going away holding its opens and layouts", flush=True)
    c.sock.close()
    return summary()


def probe(args):
    c = Client(args.port, args.export, f"probe-{os.getpid()}")
    ltype = LAYOUT4_FLEX_FILES if args.flexfiles else LAYOUT4_NFSV4_1_FILES
    fh, osd = open_file(c, f"probe-{os.getpid()}")
    lsd, bodies = layoutget(c, fh, osd, ltype)
    lsd, _ = layoutget(c, fh, lsd, ltype, IOMODE_READ)
    layoutreturn(c, fh, lsd, ltype)
    close(c, fh, osd)
    check(len(bodies) == 1, "a new client gets a layout from the MDS and returns it")
    c.sock.close()
    return summary()


def getdeviceinfo(c, devid, ltype):
    p = P().fixed(devid).u32(ltype).u32(8192).u32(0)

    def parse(u):
        u.u32()  # layout type
        body = u.opaque()
        u.bitmap()
        return body
    return c.compound([("GETDEVICEINFO", p, parse)])[-1]


def device_ports(c, devid, ltype):
    """The DS ports a device names (FILES: its multipath list; Flexible Files: its
    netaddrs)."""
    body = getdeviceinfo(c, devid, ltype)
    if ltype == LAYOUT4_FLEX_FILES:
        return [a[2] for a in decode_ff_device(body)["netaddrs"]]
    return [a[2] for a in decode_ds_addr(body)["multipath_ds_list"][0]]


def device(args):
    c = Client(args.port, args.export, f"device-{os.getpid()}")
    ltype = LAYOUT4_FLEX_FILES if args.flexfiles else LAYOUT4_NFSV4_1_FILES
    try:
        ports = device_ports(c, bytes.fromhex(args.devid), ltype)
    except Nfs4Error as e:
        print(f"error {e.status}", flush=True)
        return 0
    print(f"device {','.join(str(p) for p in ports)}", flush=True)
    return 0


def layout(args):
    c = Client(args.port, args.export, f"layout-{os.getpid()}")
    ltype = LAYOUT4_FLEX_FILES if args.flexfiles else LAYOUT4_NFSV4_1_FILES
    iomode = IOMODE_READ if args.iomode == "read" else IOMODE_RW
    fh, osd = open_file(c, args.path)
    try:
        lsd, bodies = layoutget(c, fh, osd, ltype, iomode)
    except Nfs4Error as e:
        print(f"error {ERR_NAMES.get(e.status, e.status)}", flush=True)
        close(c, fh, osd)
        return 0
    if args.flexfiles:
        devids = [ds["deviceid"] for mirror in decode_ff_layout(bodies[0])["mirrors"]
                  for ds in mirror]
    else:
        devids = [decode_file_layout(bodies[0])["deviceid"]]
    ports = [p for d in devids for p in device_ports(c, d, ltype)]
    print(f"layout {','.join(str(p) for p in ports)}", flush=True)
    print(f"devices {','.join(d.hex() for d in devids)}", flush=True)
    layoutreturn(c, fh, lsd, ltype)
    close(c, fh, osd)
    return 0


def io(args):
    """OPEN PATH, LAYOUTGET RW (FILES), GETDEVICEINFO; then at the DS that device names, at
    the address it gives: WRITE --size random bytes FILE_SYNC, READ them back. Prints `ds
    HOST:PORT`, then PASS/FAIL; the data is written to --out for a check through FUSE."""
    c = Client(args.port, args.export, f"io-{os.getpid()}")
    fh, osd = open_file(c, args.path)
    lsd, bodies = layoutget(c, fh, osd, LAYOUT4_NFSV4_1_FILES, IOMODE_RW)
    lo = decode_file_layout(bodies[0])
    _, host, port = decode_ds_addr(getdeviceinfo(c, lo["deviceid"], LAYOUT4_NFSV4_1_FILES))[
        "multipath_ds_list"][0][0]
    print(f"ds {host}:{port}", flush=True)
    ds = Client(port, "", f"io-ds-{os.getpid()}", host=host)
    dsfh = lo["fh_list"][0]
    data = os.urandom(args.size)
    for off in range(0, len(data), 65536):
        n = ds.write(dsfh, lsd, data[off:off + 65536], offset=off, stable=2)
        check(n == len(data[off:off + 65536]), f"DS WRITE at {off}: {n} bytes")
    got = b""
    while len(got) < len(data):
        chunk = ds.read(dsfh, lsd, offset=len(got))
        if not chunk:
            break
        got += chunk
    check(got == data, f"{len(data)} bytes written and read back at the DS {host}:{port}")
    with open(args.out, "wb") as f:
        f.write(data)
    layoutreturn(c, fh, lsd, LAYOUT4_NFSV4_1_FILES)
    close(c, fh, osd)
    ds.destroy()
    c.destroy()
    return summary()


def report(args):
    """OPEN PATH, LAYOUTGET RW (Flexible Files: the head's DS), then LAYOUTRETURN with an
    ff_ioerr4 of that device (WRITE failed with NFS4ERR_NXIO), CLOSE. Prints `reported
    PORT` (the device's DS)."""
    c = Client(args.port, args.export, f"report-{os.getpid()}")
    fh, osd = open_file(c, args.path)
    lsd, bodies = layoutget(c, fh, osd, LAYOUT4_FLEX_FILES, IOMODE_RW)
    devid = ff_first_device(bodies[0])
    port = device_ports(c, devid, LAYOUT4_FLEX_FILES)[0]
    layoutreturn(c, fh, lsd, LAYOUT4_FLEX_FILES, ff_layoutreturn_body(lsd, devid))
    close(c, fh, osd)
    c.destroy()
    print(f"reported {port}", flush=True)
    return 0


def hold(args):
    c = Client(args.port, args.export, f"hold-{os.getpid()}")
    ltype = LAYOUT4_FLEX_FILES if args.flexfiles else LAYOUT4_NFSV4_1_FILES
    fh, osd = open_file(c, args.path)
    lsd, _ = layoutget(c, fh, osd, ltype, IOMODE_RW)
    state = {"sd": lsd}
    t0 = time.monotonic()
    done = threading.Event()

    def say(what):
        print(f"{what}", flush=True)

    def on_layoutrecall(r):
        say(f"recalled {time.monotonic() - t0:.1f} {r['kind']} iomode {r['iomode']} "
            f"changed {r['changed']} type {r['type']}")
        try:
            if r["kind"] == "file" and r.get("fh") != fh:
                say("recall-of-another-file")
            # the recall carries the layout stateid with its seqid moved (RFC 8881 §12.5.3)
            layoutreturn(c, fh, r.get("stateid", state["sd"]), ltype)
            say(f"returned {time.monotonic() - t0:.1f}")
        except Nfs4Error as e:
            say(f"return-failed-{e.status}")
        done.set()
    c.on_layoutrecall = on_layoutrecall
    say("ready")
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("ready\n")
    deadline = t0 + args.timeout
    while time.monotonic() < deadline and not done.is_set():
        time.sleep(0.5)
        try:
            c.renew()
        except (Nfs4Error, ConnectionError) as e:
            say(f"renew-failed-{e}")
            break
    if not done.is_set():
        say("no-recall")
        try:
            layoutreturn(c, fh, state["sd"], ltype)
        except Nfs4Error as e:
            say(f"return-failed-{e.status}")
    try:
        close(c, fh, osd)
    except Nfs4Error as e:
        say(f"close-failed-{e.status}")
    try:
        c.destroy()
    except (Nfs4Error, ConnectionError, RuntimeError) as e:
        say(f"destroy-failed-{e}")
    return 0


def summary():
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--export", required=True)
    a.add_argument("--flexfiles", action="store_true", help="Flexible Files layouts")
    sub = a.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reuse")
    r.add_argument("n", type=int)
    r.add_argument("--prefix", default="reuse-")
    r.add_argument("--go-away", action="store_true")
    sub.add_parser("probe")
    lo = sub.add_parser("layout")
    lo.add_argument("path")
    lo.add_argument("--iomode", choices=("read", "rw"), default="rw")
    d = sub.add_parser("device")
    d.add_argument("devid")
    i = sub.add_parser("io")
    i.add_argument("path")
    i.add_argument("--size", type=int, default=300000)
    i.add_argument("--out", required=True)
    rp = sub.add_parser("report")
    rp.add_argument("path")
    h = sub.add_parser("hold")
    h.add_argument("path")
    h.add_argument("--ready")
    h.add_argument("--timeout", type=float, default=60.0)
    args = a.parse_args()
    return {"reuse": reuse, "probe": probe, "layout": layout, "device": device,
            "hold": hold, "io": io, "report": report}[args.cmd](args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (Nfs4Error, ConnectionError, RuntimeError) as e:
        print(f"FAIL {e}", flush=True)
        print(f"{passed} passed, {failed + 1} failed", flush=True)
        sys.exit(1)
