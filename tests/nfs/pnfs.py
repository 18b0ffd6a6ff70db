#!/usr/bin/env python3
"""pNFS FILES and Flexible Files layouts of FSAL_CAIRN, checked on the wire (tests/nfs/pnfs.sh).

A raw NFSv4.1 client (nfs4raw.py) asks the MDS for a layout and a device, decodes both
against RFC 8881's XDR (§13.3 nfsv4_1_file_layout4, §13.4 nfsv4_1_file_layout_ds_addr4,
§3.3.9 netaddr4) independently of the server's encoder, then does the I/O itself at the
DS the device names first (the file's chain head), commits it there, LAYOUTCOMMITs at the
MDS and reads it back through the MDS. Then bad input: LAYOUTGET on a directory, a
symlink and a FIFO, an iomode or range the server must refuse, an unknown layout type, a
bogus stateid, LAYOUTCOMMIT with an impossible size, GETDEVICEINFO of an unknown device.

With --ff-export, the same for an export with Flexible Files layouts (RFC 8435 §5.1
ff_layout4, §5.2 ff_device_addr4, decoded here): an RW layout names the chain head's DS
only, a READ layout one mirror per DS in chain order rotated by the client ID (clients
spread over the mirrors) with falling efficiency, every
mirror's DS reads the data back, and a FILES LAYOUTGET or GETDEVICEINFO there is refused.

  pnfs.py --mds PORT --export /vol0 --plain-export /vol0np --ds n1=PORT,n2=PORT
          --head-node-of-rotation n1,n2 --files f1:SIZE,... --special sym,fifo,dir
          [--ff-export /vol0ff] [--keep-fh FILE] [--reuse-fh FILE]

Prints PASS/FAIL lines and a last line "N passed, M failed"; exit 1 on any failure.
"""

import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nfs4raw import OP, ERRORS, Client, Nfs4Error, Stateid, _parse_stateid  # noqa: E402
from xdr import Packer, Unpacker  # noqa: E402

OP.update({"COMMIT": 5, "GETATTR": 9, "GETDEVICEINFO": 47, "LAYOUTCOMMIT": 49,
           "LAYOUTGET": 50, "LAYOUTRETURN": 51})
ERRORS.update({10001: "NFS4ERR_BADHANDLE", 21: "NFS4ERR_ISDIR",
               10049: "NFS4ERR_BADIOMODE", 10050: "NFS4ERR_BADLAYOUT",
               10058: "NFS4ERR_LAYOUTTRYLATER", 10059: "NFS4ERR_LAYOUTUNAVAILABLE",
               10062: "NFS4ERR_UNKNOWN_LAYOUTTYPE", 10083: "NFS4ERR_WRONG_TYPE",
               70: "NFS4ERR_STALE", 10005: "NFS4ERR_TOOSMALL", 2: "NFS4ERR_NOENT",
               10006: "NFS4ERR_SERVERFAULT", 10004: "NFS4ERR_NOTSUPP"})

LAYOUT4_NFSV4_1_FILES = 1
LAYOUT4_FLEX_FILES = 4
IOMODE_READ, IOMODE_RW, IOMODE_ANY = 1, 2, 3
ALL = 0xFFFFFFFFFFFFFFFF
FATTR4_FS_LAYOUT_TYPES = 62
FH4_FLAG_DS = 0x01  # Ganesha's FILE_HANDLE_V4_FLAG_DS in a DS handle's fhflags1

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {what}")
    else:
        failed += 1
        print(f"FAIL {what}")
    sys.stdout.flush()


def expect_err(fn, name, what):
    try:
        fn()
    except Nfs4Error as e:
        check(e.name == name, f"{what}: {e.name} (want {name})")
        return
    check(False, f"{what}: succeeded (want {name})")


# --- RFC 8881 decoders (independent of Ganesha's encoders) ------------------------------
def decode_file_layout(body):
    """nfsv4_1_file_layout4 (§13.3)."""
    u = Unpacker(body)
    lo = {"deviceid": u.fixed(16), "util": u.u32(), "first_stripe_index": u.u32(),
          "pattern_offset": u.u64()}
    lo["fh_list"] = [u.opaque() for _ in range(u.u32())]
    lo["rest"] = len(body) - u.p
    return lo


def decode_netaddr(u):
    """netaddr4 (§3.3.9): r_netid, r_addr "h1.h2.h3.h4.p1.p2" -> ("tcp", "a.b.c.d", port)."""
    netid, raddr = u.opaque().decode(), u.opaque().decode()
    parts = raddr.split(".")
    return netid, ".".join(parts[:-2]), int(parts[-2]) * 256 + int(parts[-1])


def decode_ds_addr(body):
    """nfsv4_1_file_layout_ds_addr4 (§13.4)."""
    u = Unpacker(body)
    indices = [u.u32() for _ in range(u.u32())]
    lists = []
    for _ in range(u.u32()):
        lists.append([decode_netaddr(u) for _ in range(u.u32())])
    return {"stripe_indices": indices, "multipath_ds_list": lists, "rest": len(body) - u.p}


def decode_ff_layout(body):
    """ff_layout4 (RFC 8435 §5.1)."""
    u = Unpacker(body)
    lo = {"stripe_unit": u.u64(), "mirrors": []}
    for _ in range(u.u32()):
        servers = []
        for _ in range(u.u32()):
            ds = {"deviceid": u.fixed(16), "efficiency": u.u32(),
                  "stateid": (u.u32(), u.fixed(12))}
            ds["fh_vers"] = [u.opaque() for _ in range(u.u32())]
            ds["user"], ds["group"] = u.opaque().decode(), u.opaque().decode()
            servers.append(ds)
        lo["mirrors"].append(servers)
    lo["flags"], lo["stats_collect_hint"] = u.u32(), u.u32()
    lo["rest"] = len(body) - u.p
    return lo


def decode_ff_device(body):
    """ff_device_addr4 (RFC 8435 §5.2)."""
    u = Unpacker(body)
    dev = {"netaddrs": [decode_netaddr(u) for _ in range(u.u32())], "versions": []}
    for _ in range(u.u32()):
        dev["versions"].append({"version": u.u32(), "minor": u.u32(), "rsize": u.u32(),
                                "wsize": u.u32(), "tightly_coupled": u.u32()})
    dev["rest"] = len(body) - u.p
    return dev


# --- operations ---------------------------------------------------------------------------
def putfh(fh):
    return ("PUTFH", Packer().opaque(fh), None)


def layoutget(c, fh, stateid, ltype=LAYOUT4_NFSV4_1_FILES, iomode=IOMODE_RW, offset=0,
              length=ALL, minlength=0):
    p = Packer().u32(0).u32(ltype).u32(iomode).u64(offset).u64(length).u64(minlength)
    stateid.pack(p)
    p.u32(4096)

    def parse(u):
        roc = u.u32()
        sid = _parse_stateid(u)
        segs = []
        for _ in range(u.u32()):
            off, ln, mode = u.u64(), u.u64(), u.u32()
            typ, body = u.u32(), u.opaque()
            segs.append({"offset": off, "length": ln, "iomode": mode, "type": typ,
                         "body": body})
        return roc, sid, segs
    return c.compound([putfh(fh), ("LAYOUTGET", p, parse)])[-1]


def getdeviceinfo(c, devid, ltype=LAYOUT4_NFSV4_1_FILES):
    p = Packer().fixed(devid).u32(ltype).u32(8192).u32(0)

    def parse(u):
        typ, body = u.u32(), u.opaque()
        u.bitmap()
        return typ, body
    return c.compound([("GETDEVICEINFO", p, parse)])[-1]


def layoutcommit(c, fh, stateid, last_write=None, mtime=None, ltype=LAYOUT4_NFSV4_1_FILES):
    p = Packer().u64(0).u64(ALL).u32(0)
    stateid.pack(p)
    if last_write is None:
        p.u32(0)
    else:
        p.u32(1).u64(last_write)
    if mtime is None:
        p.u32(0)
    else:
        p.u32(1).u64(mtime[0]).u32(mtime[1])
    p.u32(ltype).opaque(b"")

    def parse(u):
        return u.u64() if u.u32() else None
    return c.compound([putfh(fh), ("LAYOUTCOMMIT", p, parse)])[-1]


def layoutreturn(c, fh, stateid, ltype=LAYOUT4_NFSV4_1_FILES):
    p = Packer().u32(0).u32(ltype).u32(IOMODE_ANY).u32(1)
    p.u64(0).u64(ALL)
    stateid.pack(p)
    p.opaque(b"")

    def parse(u):
        return _parse_stateid(u) if u.u32() else None
    return c.compound([putfh(fh), ("LAYOUTRETURN", p, parse)])[-1]


def ds_write(c, fh, stateid, offset, data, stable=0):
    p = Packer()
    stateid.pack(p)
    p.u64(offset).u32(stable).opaque(data)

    def parse(u):
        n, how, verf = u.u32(), u.u32(), u.fixed(8)
        return n, how, verf
    return c.compound([putfh(fh), ("WRITE", p, parse)])[-1]


def ds_read(c, fh, stateid, offset, count):
    p = Packer()
    stateid.pack(p)
    p.u64(offset).u32(count)

    def parse(u):
        eof = u.u32()
        return eof, u.opaque()
    return c.compound([putfh(fh), ("READ", p, parse)])[-1]


def ds_commit(c, fh):
    return c.compound([putfh(fh), ("COMMIT", Packer().u64(0).u32(0),
                                   lambda u: u.fixed(8))])[-1]


def lookup_fh(c, path):
    ops = c._dir_ops() + [("LOOKUP", Packer().opaque(x), None)
                          for x in path.strip("/").split("/")]
    ops.append(("GETFH", None, lambda u: u.opaque()))
    return c.compound(ops)[-1]


def root_layout_types(c):
    def parse(u):
        bits = u.bitmap()
        vals = Unpacker(u.opaque())
        assert bits[1] & (1 << (FATTR4_FS_LAYOUT_TYPES - 32)), bits
        return [vals.u32() for _ in range(vals.u32())]
    ops = c._dir_ops() + [("GETATTR", Packer().u32(2).u32(0).u32(
        1 << (FATTR4_FS_LAYOUT_TYPES - 32)), parse)]
    return c.compound(ops)[-1]


def wire_of(fh):
    """Ganesha's v4 handle: version, flags, id (2), fs_len, then FSAL_CAIRN's wire handle
    (volume id 16 + inode id 16)."""
    return fh[1], struct.unpack(">H", fh[2:4])[0], fh[5:5 + fh[4]]


def ino_of(inode):
    """cairn_proto::Id::ino: the 64-bit fold of the 128-bit id."""
    v = int.from_bytes(inode, "big")
    lo, hi = v & ALL, v >> 64
    rot = ((hi << 17) | (hi >> 47)) & ALL
    f = lo ^ rot
    return f | 2 if f <= 1 else f


def read_all(c, fh, stateid, size):
    got = b""
    while len(got) < size:
        _, chunk = ds_read(c, fh, stateid, len(got), 65536)
        got += chunk
        if not chunk:
            break
    return got


def ff_checks(args, ds_port, head_node, ds_clients):
    """Flexible Files layouts on args.ff_export (export id in the device ids: any)."""
    anon = Stateid(0, b"\0" * 12)

    def ds_client(port):
        if port not in ds_clients:
            ds_clients[port] = Client(port, 1, "", f"pnfs-ds-{port}")
        return ds_clients[port]

    def device_port(devid, what):
        typ, body = getdeviceinfo(mds, devid, LAYOUT4_FLEX_FILES)
        dev = decode_ff_device(body)
        check(typ == LAYOUT4_FLEX_FILES and dev["rest"] == 0 and len(dev["netaddrs"]) == 1
              and dev["versions"] == [{"version": 4, "minor": 1, "rsize": 1 << 20,
                                       "wsize": 1 << 20, "tightly_coupled": 1}] and
              dev["netaddrs"][0][:2] == ("tcp", "127.0.0.1"),
              f"{what}: ff_device_addr4 decodes exactly: one netaddr4 {dev['netaddrs']}, "
              f"NFSv4.1 tightly coupled, rsize = wsize = 1 MiB")
        return dev["netaddrs"][0][2]

    mirrors = []
    spread_checked = False
    mds = Client(args.mds, 1, args.ff_export, "pnfs-ff")
    check(root_layout_types(mds) == [LAYOUT4_FLEX_FILES],
          f"{args.ff_export}: fs_layout_types = [LAYOUT4_FLEX_FILES]")
    for spec in args.files.split(","):
        name, size = spec.split(":")
        name, size = "ff-" + name, int(size)
        data = os.urandom(size)
        o = mds.open(name, "both", "none", create=True)
        expect_err(lambda: layoutget(mds, o.fh, o.stateid), "NFS4ERR_UNKNOWN_LAYOUTTYPE",
                   f"{name}: LAYOUTGET FILES on a Flexible Files export")
        roc, lsid, segs = layoutget(mds, o.fh, o.stateid, ltype=LAYOUT4_FLEX_FILES)
        check(len(segs) == 1 and segs[0]["offset"] == 0 and segs[0]["length"] == ALL and
              segs[0]["iomode"] == IOMODE_RW and segs[0]["type"] == LAYOUT4_FLEX_FILES
              and roc, f"{name}: LAYOUTGET RW: one whole-file FLEX_FILES segment, return on "
              f"close")
        lo = decode_ff_layout(segs[0]["body"])
        _, _, mwire = wire_of(o.fh)
        ok = lo["rest"] == 0 and len(lo["mirrors"]) == 1 and len(lo["mirrors"][0]) == 1
        ds = lo["mirrors"][0][0] if ok else {}
        check(ok and lo["stripe_unit"] > 0 and lo["flags"] == 0 and
              lo["stats_collect_hint"] == 0 and ds["stateid"] == (0, b"\0" * 12) and
              len(ds["fh_vers"]) == 1 and ds["user"] == "0" and ds["group"] == "0",
              f"{name}: ff_layout4 decodes exactly: one mirror (the chain head: writes go to "
              f"the head only), one data server, anonymous stateid, flags 0 (I/O through "
              f"the MDS allowed, LAYOUTCOMMIT wanted), owner 0:0")
        if not ok:
            continue
        dsfh = ds["fh_vers"][0]
        flags, _, dwire = wire_of(dsfh)
        check(flags & FH4_FLAG_DS and dwire == mwire,
              f"{name}: the mirror's handle is the DS handle of the MDS's wire handle")
        rotation = ino_of(mwire[16:]) % len(head_node)
        want_head = head_node[rotation]
        port = device_port(ds["deviceid"], f"{name} RW mirror")
        check(port == ds_port[want_head], f"{name}: the RW mirror is the chain head's DS "
              f"({want_head}, rotation {rotation}, port {port})")
        c = ds_client(port)
        for off in range(0, size, 65536):
            ds_write(c, dsfh, anon, off, data[off:off + 65536])
        ds_commit(c, dsfh)
        newsize = layoutcommit(mds, o.fh, lsid, last_write=size - 1 if size else None,
                               ltype=LAYOUT4_FLEX_FILES)
        check(size == 0 or newsize == size, f"{name}: {size} bytes written at the head's DS "
              f"with the anonymous stateid, LAYOUTCOMMIT (FLEX_FILES): new size {newsize}")
        got = b""
        while len(got) < size:
            chunk = mds.read(o, offset=len(got), count=6144)
            got += chunk
            if not chunk:
                break
        check(got == data, f"{name}: read back through the MDS: the same {len(got)} bytes")
        with open(os.path.join(os.environ["PNFS_OUT"], name), "wb") as f:
            f.write(data)
        layoutreturn(mds, o.fh, lsid, LAYOUT4_FLEX_FILES)
        mds.close(o)
        # a READ layout: a mirror per DS, in chain order rotated by the client ID (clients
        # spread over the mirrors), efficiency falling from the first
        o = mds.open(name, "read", "none")
        _, lsid, segs = layoutget(mds, o.fh, o.stateid, ltype=LAYOUT4_FLEX_FILES,
                                  iomode=IOMODE_READ)
        lo = decode_ff_layout(segs[0]["body"])
        mirrors = [m[0] for m in lo["mirrors"] if len(m) == 1]
        ports = [device_port(m["deviceid"], f"{name} READ mirror") for m in mirrors]
        chain = [ds_port[head_node[(rotation + i) % len(head_node)]]
                 for i in range(len(head_node))]
        r = mds.clientid % len(chain)
        want = chain[r:] + chain[:r]
        effs = [m["efficiency"] for m in mirrors]
        check(lo["rest"] == 0 and segs[0]["iomode"] == IOMODE_READ and
              len(mirrors) == len(lo["mirrors"]) and ports == want and
              effs == sorted(effs, reverse=True) and len(set(effs)) == len(effs) and
              len({m["deviceid"] for m in mirrors}) == len(mirrors),
              f"{name}: LAYOUTGET READ: mirrors at ports {ports} (chain order {chain} "
              f"rotated by client ID {mds.clientid:#x}: {want}), efficiencies {effs} "
              f"falling from the first, one device per brick")
        if not spread_checked:
            spread_checked = True
            firsts = {}
            for k in range(4):
                c = Client(args.mds, 1, args.ff_export, f"pnfs-ff-reader-{k}")
                co = c.open(name, "read", "none")
                _, csid, csegs = layoutget(c, co.fh, co.stateid, ltype=LAYOUT4_FLEX_FILES,
                                           iomode=IOMODE_READ)
                cm = [m[0] for m in decode_ff_layout(csegs[0]["body"])["mirrors"]]
                firsts[c.clientid] = device_port(cm[0]["deviceid"], f"{name} reader {k}")
                layoutreturn(c, co.fh, csid, LAYOUT4_FLEX_FILES)
                c.close(co)
                c.shutdown()
            check(all(p == chain[cid % len(chain)] for cid, p in firsts.items()) and
                  len(set(firsts.values())) > 1,
                  f"{name}: 4 clients' READ layouts put different DSs first (client ID: "
                  f"first mirror's port: { {hex(k): v for k, v in firsts.items()} })")
        for m, port in zip(mirrors, ports):
            got = read_all(ds_client(port), m["fh_vers"][0], anon, size)
            check(got == data, f"{name}: read at the mirror on port {port}: {len(got)} "
                  f"bytes, the same")
        layoutreturn(mds, o.fh, lsid, LAYOUT4_FLEX_FILES)
        mds.close(o)
    check(bool(mirrors), "a READ layout with mirrors was decoded")
    devid = mirrors[0]["deviceid"] if mirrors else b"\0" * 16
    expect_err(lambda: getdeviceinfo(mds, devid), "NFS4ERR_UNKNOWN_LAYOUTTYPE",
               "GETDEVICEINFO type FILES of a Flexible Files export's device")
    expect_err(lambda: getdeviceinfo(mds, devid[:8] + b"\0" * 8, LAYOUT4_FLEX_FILES),
               "NFS4ERR_NOENT", "GETDEVICEINFO FLEX_FILES of a device naming no brick")
    mds.shutdown()


def shrink_race(mds, fuse_dir, rounds):
    """LAYOUTCOMMIT never shrinks a file: each round empties file race through FUSE, then at
    once writes 64 KiB at 1-2 MiB there (fsynced) and LAYOUTCOMMITs a last write below
    1 MiB at the MDS. An MDS that reads the size (0) and then sets size = last write + 1
    cuts off the FUSE write when it landed in between; an extend-only one never does."""
    import random
    import threading
    path = os.path.join(fuse_dir, "race")
    o = mds.open("race", "both", "none", create=True)
    _, lsid, _ = layoutget(mds, o.fh, o.stateid)
    lost = []
    for r in range(rounds):
        fd = os.open(path, os.O_RDWR)
        os.ftruncate(fd, 0)
        os.fsync(fd)
        off = (1 << 20) + random.randrange(16) * 65536
        chunk = bytes([r % 250 + 1]) * 65536
        lw = random.randrange(1 << 20)
        go = threading.Barrier(2)

        def writer():
            go.wait()
            os.pwrite(fd, chunk, off)
            os.fsync(fd)
        t = threading.Thread(target=writer)
        t.start()
        go.wait()
        layoutcommit(mds, o.fh, lsid, last_write=lw)
        t.join()
        os.close(fd)
        got = mds.read(o, offset=off, count=6144)
        if got != chunk[:6144]:
            lost.append((r, off, lw, len(got)))
    check(not lost, f"race: {rounds} rounds of a FUSE write at 1-2 MiB racing a LAYOUTCOMMIT "
          f"below 1 MiB: the FUSE write survived every one (lost: {lost[:5]})")
    layoutreturn(mds, o.fh, lsid)
    mds.close(o)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--mds", type=int, required=True)
    a.add_argument("--export", required=True)
    a.add_argument("--plain-export", required=True)
    a.add_argument("--ds", required=True, help="NODE=PORT,...")
    a.add_argument("--head-node-of-rotation", required=True,
                   help="NODE,NODE: the node whose brick heads the chain, by rotation")
    a.add_argument("--files", required=True, help="NAME:SIZE,...")
    a.add_argument("--special", required=True, help="SYMLINK,FIFO,DIR names")
    a.add_argument("--ff-export")
    a.add_argument("--race-dir", help="the volume's FUSE mount: run shrink_race there")
    a.add_argument("--race-rounds", type=int, default=60)
    a.add_argument("--keep-fh")
    a.add_argument("--reuse-fh")
    args = a.parse_args()
    ds_port = {k: int(v) for k, v in (x.split("=") for x in args.ds.split(","))}
    head_node = args.head_node_of_rotation.split(",")

    mds = Client(args.mds, 1, args.export, "pnfs-mds")
    if args.reuse_fh:
        # A DS handle kept from before the DS (and the MDS) restarted still works.
        name, dsport, fh, data_hex = open(args.reuse_fh).read().split()
        ds = Client(int(dsport), 1, "", "pnfs-ds-again")
        data = bytes.fromhex(data_hex)
        eof, got = ds_read(ds, bytes.fromhex(fh), Stateid(0, b"\0" * 12), 0, len(data) + 10)
        check(got == data and eof, f"{name}: the DS handle kept across a DS restart reads "
              f"{len(got)} bytes, the same")
        ds.shutdown()
        mds.shutdown()
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0

    check(root_layout_types(mds) == [LAYOUT4_NFSV4_1_FILES],
          f"{args.export}: fs_layout_types = [LAYOUT4_NFSV4_1_FILES]")
    plain = Client(args.mds, 1, args.plain_export, "pnfs-plain")
    check(root_layout_types(plain) == [], f"{args.plain_export} (PNFS off): no layout types")

    ds_clients = {}
    for spec in args.files.split(","):
        name, size = spec.split(":")
        size = int(size)
        data = os.urandom(size)
        o = mds.open(name, "both", "none", create=True)
        roc, lsid, segs = layoutget(mds, o.fh, o.stateid)
        check(len(segs) == 1 and segs[0]["offset"] == 0 and segs[0]["length"] == ALL and
              segs[0]["iomode"] == IOMODE_RW and segs[0]["type"] == LAYOUT4_NFSV4_1_FILES
              and roc, f"{name}: LAYOUTGET RW: one whole-file FILES segment, return on close")
        lo = decode_file_layout(segs[0]["body"])
        check(lo["rest"] == 0 and lo["first_stripe_index"] == 0 and
              lo["pattern_offset"] == 0 and len(lo["fh_list"]) == 1,
              f"{name}: nfsv4_1_file_layout4 decodes exactly: one stripe, index 0, offset 0")
        unit = lo["util"] & ~0x3F
        check(unit > 0 and lo["util"] & 0x3F == 0,
              f"{name}: nfl_util stripe unit {unit}, sparse, commit through the DS")
        dsfh = lo["fh_list"][0]
        flags, ds_id, dwire = wire_of(dsfh)
        _, _, mwire = wire_of(o.fh)
        check(flags & FH4_FLAG_DS and dwire == mwire and len(dwire) == 32,
              f"{name}: the DS handle carries the MDS's 32-byte wire handle "
              f"(volume + inode id), DS id {ds_id}")
        typ, body = getdeviceinfo(mds, lo["deviceid"])
        dev = decode_ds_addr(body)
        check(typ == LAYOUT4_NFSV4_1_FILES and dev["rest"] == 0 and
              dev["stripe_indices"] == [0] and len(dev["multipath_ds_list"]) == 1,
              f"{name}: nfsv4_1_file_layout_ds_addr4 decodes exactly: one stripe, one "
              f"multipath list")
        paths = dev["multipath_ds_list"][0]
        ports = [p for _, _, p in paths]
        rotation = ino_of(mwire[16:]) % len(head_node)
        want_head = head_node[rotation]
        check(all(n == "tcp" and h == "127.0.0.1" for n, h, _ in paths) and
              ports == [ds_port[want_head]],
              f"{name}: multipath {paths}: the chain head's DS ({want_head}, rotation "
              f"{rotation}) only (a multipath list is one server's addresses)")
        dport = ports[0]
        if dport not in ds_clients:
            ds_clients[dport] = Client(dport, 1, "", f"pnfs-ds-{dport}")
        ds = ds_clients[dport]
        # I/O at the DS: UNSTABLE writes in 64 KiB pieces, COMMIT with the same verifier
        verfs = set()
        for off in range(0, size, 65536):
            n, how, verf = ds_write(ds, dsfh, lsid, off, data[off:off + 65536])
            verfs.add(verf)
            if n != len(data[off:off + 65536]):
                check(False, f"{name}: DS WRITE at {off} wrote {n}")
        cverf = ds_commit(ds, dsfh)
        check(verfs <= {cverf}, f"{name}: {size} bytes written UNSTABLE at the DS on port "
              f"{dport}, COMMIT there with the WRITE verifier")
        got = b""
        while len(got) < size:
            eof, chunk = ds_read(ds, dsfh, lsid, len(got), 65536)
            got += chunk
            if not chunk:
                break
        check(got == data, f"{name}: read back at the DS: {len(got)} bytes, the same")
        newsize = layoutcommit(mds, o.fh, lsid, last_write=size - 1 if size else None,
                               mtime=(2000000000, 5))
        check(size == 0 or newsize == size, f"{name}: LAYOUTCOMMIT last write {size - 1}: "
              f"new size {newsize}")
        got = b""
        while len(got) < size:
            # the session caches replies of at most 8 KiB (nfs4raw.py)
            chunk = mds.read(o, offset=len(got), count=6144)
            got += chunk
            if not chunk:
                break
        check(got == data, f"{name}: read back through the MDS: the same {len(got)} bytes")
        with open(os.path.join(os.environ["PNFS_OUT"], name), "wb") as f:
            f.write(data)
        # bad commits with the layout's stateid, then the layout goes back
        expect_err(lambda: layoutcommit(mds, o.fh, lsid, last_write=1 << 63),
                   "NFS4ERR_INVAL", f"{name}: LAYOUTCOMMIT last write at 2^63")
        expect_err(lambda: layoutcommit(mds, o.fh, lsid, last_write=ALL),
                   "NFS4ERR_INVAL", f"{name}: LAYOUTCOMMIT last write at 2^64 - 1")
        r = layoutreturn(mds, o.fh, lsid)
        check(True, f"{name}: LAYOUTRETURN ok (stateid {r})")
        # bad LAYOUTGETs on a real file with its open stateid
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, iomode=IOMODE_ANY),
                   "NFS4ERR_BADIOMODE", f"{name}: LAYOUTGET iomode ANY")
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, iomode=7),
                   "NFS4ERR_BADIOMODE", f"{name}: LAYOUTGET iomode 7")
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, length=0),
                   "NFS4ERR_INVAL", f"{name}: LAYOUTGET length 0")
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, offset=ALL - 10, length=100),
                   "NFS4ERR_INVAL", f"{name}: LAYOUTGET range past 2^64 - 1")
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, length=4096, minlength=8192),
                   "NFS4ERR_INVAL", f"{name}: LAYOUTGET minlength > length")
        expect_err(lambda: layoutget(mds, o.fh, o.stateid, ltype=LAYOUT4_FLEX_FILES),
                   "NFS4ERR_UNKNOWN_LAYOUTTYPE", f"{name}: LAYOUTGET FLEX_FILES")
        bogus = Stateid(o.stateid.seqid, o.stateid.other[:8] +
                        bytes(b ^ 0x5A for b in o.stateid.other[8:]))
        expect_err(lambda: layoutget(mds, o.fh, bogus), "NFS4ERR_BAD_STATEID",
                   f"{name}: LAYOUTGET with a stateid of this server it never issued")
        expect_err(lambda: layoutget(mds, o.fh, Stateid(1, os.urandom(12))),
                   "NFS4ERR_STALE_STATEID",
                   f"{name}: LAYOUTGET with another server instance's stateid")
        mds.close(o)
        if args.keep_fh and size > 0:
            with open(args.keep_fh, "w") as f:
                f.write(f"{name} {dport} {dsfh.hex()} {data.hex()}\n")

    # LAYOUTCOMMIT's size reaches the backend: 100 bytes written at the DS, a last
    # write offset of 65535 reported (a write the client says it made further on)
    o = mds.open("grown", "both", "none", create=True)
    _, lsid, segs = layoutget(mds, o.fh, o.stateid)
    dsfh = decode_file_layout(segs[0]["body"])["fh_list"][0]
    dev = decode_ds_addr(getdeviceinfo(mds, decode_file_layout(segs[0]["body"])["deviceid"])[1])
    dport = dev["multipath_ds_list"][0][0][2]
    if dport not in ds_clients:
        ds_clients[dport] = Client(dport, 1, "", f"pnfs-ds-{dport}")
    # FILE_SYNC asked, DATA_SYNC4 answered: the data is stable but the MDS does not
    # know the new size until LAYOUTCOMMIT, and a FILE_SYNC4 answer tells a client it
    # need not send one (RFC 5661 erratum 2751; Linux then sent none and the file read
    # back at its old size)
    n, how, _ = ds_write(ds_clients[dport], dsfh, lsid, 0, b"g" * 100, stable=2)
    check(n == 100 and how == 1, f"grown: FILE_SYNC WRITE of 100 bytes at the DS: wrote {n}, "
          f"committed {how} (want 1, DATA_SYNC4: the client must LAYOUTCOMMIT)")
    newsize = layoutcommit(mds, o.fh, lsid, last_write=65535)
    check(newsize == 65536, f"grown: LAYOUTCOMMIT last write 65535 after 100 bytes: new size "
          f"{newsize}")
    layoutreturn(mds, o.fh, lsid)
    mds.close(o)

    if args.race_dir:
        shrink_race(mds, args.race_dir, args.race_rounds)

    lnk, fifo, d = args.special.split(",")
    o = mds.open(args.files.split(",")[0].split(":")[0], "read", "none")
    for what, name, want in ((f"directory {d}", d, "NFS4ERR_ISDIR"),
                             (f"symlink {lnk}", lnk, "NFS4ERR_INVAL"),
                             (f"FIFO {fifo}", fifo, "NFS4ERR_INVAL")):
        fh = lookup_fh(mds, name)
        expect_err(lambda: layoutget(mds, fh, o.stateid, iomode=IOMODE_READ), want,
                   f"LAYOUTGET on the {what} (Ganesha's type check)")
    roc, lsid, segs = layoutget(mds, o.fh, o.stateid, iomode=IOMODE_READ)
    check(len(segs) == 1 and segs[0]["iomode"] == IOMODE_READ,
          "LAYOUTGET READ through a read-only open: a READ segment")
    expect_err(lambda: getdeviceinfo(mds, b"\x01\x00" + struct.pack("<H", 1) +
                                     struct.pack("<I", 0xFFFFFFF0) + b"\0" * 8),
               "NFS4ERR_NOENT", "GETDEVICEINFO of a replica set the volume lacks")
    po = plain.open("plain-file", "both", "none", create=True)
    expect_err(lambda: layoutget(plain, po.fh, po.stateid), "NFS4ERR_LAYOUTUNAVAILABLE",
               f"LAYOUTGET on {args.plain_export} (PNFS off)")
    if args.ff_export:
        ff_checks(args, ds_port, head_node, ds_clients)
    for c in list(ds_clients.values()) + [mds, plain]:
        c.shutdown()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
