#!/usr/bin/env python3
"""A raw NFSv4.0/4.1 client (ONC RPC + XDR by hand) for protocol details that nfs-rs does
not expose or that it would check itself before sending: EXCHANGE_ID's reply flags,
SETATTR on a symlink's own handle, READ at any 64-bit offset.

    nfsraw.py --port P [--minor 0|1] CMD ARGS...

  exchange-id FLAGS          EXCHANGE_ID with eia_flags FLAGS (a number, 0x.. allowed);
                             prints eir_flags as 0x%08x
  setattr-mode PATH OCTAL    SETATTR(mode) on PATH's own handle (LOOKUP does not follow a
                             final symlink); prints the NFS4 status name
  read PATH OFFSET COUNT     READ with the anonymous stateid; prints "STATUS EOF LENGTH"
                             (EOF and LENGTH are "-" unless STATUS is NFS4_OK)
  write PATH OFFSET TEXT     WRITE (FILE_SYNC, anonymous stateid); prints the status

PATH is the pseudo-fs path ("/vol0/d/s"). Every call is AUTH_SYS uid 0. A failure of the
RPC itself (not an NFS4 status) exits 1 with the reason on stderr.
"""

import argparse
import os
import socket
import struct
import sys

from xdr import Packer, Unpacker, accepted, call_header, record, recv_record

NFS_PROGRAM, NFS_V4, COMPOUND = 100003, 4, 1
OP_LOOKUP, OP_PUTROOTFH, OP_READ, OP_SETATTR, OP_WRITE = 15, 24, 25, 34, 38
OP_EXCHANGE_ID, OP_CREATE_SESSION, OP_SEQUENCE = 42, 43, 53
FATTR4_MODE = 33
STATUS = {
    0: "NFS4_OK", 1: "NFS4ERR_PERM", 2: "NFS4ERR_NOENT", 5: "NFS4ERR_IO",
    13: "NFS4ERR_ACCESS", 22: "NFS4ERR_INVAL", 27: "NFS4ERR_FBIG", 10004: "NFS4ERR_NOTSUPP",
    10006: "NFS4ERR_SERVERFAULT", 10007: "NFS4ERR_BADTYPE", 10013: "NFS4ERR_GRACE",
    10032: "NFS4ERR_ATTRNOTSUPP", 10038: "NFS4ERR_SYMLINK", 10052: "NFS4ERR_BADXDR",
}


def status_name(s):
    return STATUS.get(s, f"NFS4ERR_{s}")


class Rpc:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.xid = int.from_bytes(os.urandom(4), "big")

    def call(self, body):
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        p = call_header(self.xid, NFS_PROGRAM, NFS_V4, COMPOUND, "nfsraw")
        self.s.sendall(record(bytes(p.b) + body))
        u = Unpacker(recv_record(self._recv))
        xid, mtype, reply_stat = u.u32(), u.u32(), u.u32()
        if xid != self.xid or mtype != 1 or reply_stat != 0:
            raise SystemExit(f"nfsraw: RPC reply xid {xid} type {mtype} stat {reply_stat}")
        accept = accepted(u)
        if accept != 0:
            raise SystemExit(f"nfsraw: RPC call not accepted (accept_stat {accept})")
        return u

    def _recv(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise SystemExit("nfsraw: server closed the connection")
            b += c
        return b


class Client:
    """One connection; with minor 1 a client id and a session (one slot)."""

    def __init__(self, port, minor):
        self.rpc, self.minor, self.session, self.seq = Rpc(port), minor, None, 1
        if minor >= 1:
            self.clientid, seqid, _ = self.exchange_id(0)
            self.create_session(self.clientid, seqid)

    def compound(self, ops, minor=None):
        """ops: [(opnum, packed args)]; returns (status, [(opnum, status, Unpacker)])
        with the unpacker left at the start of that op's result body: only the last
        op's body may be read by the caller (earlier ones are skipped here)."""
        minor = self.minor if minor is None else minor
        if self.session is not None:
            ops = [(OP_SEQUENCE, Packer().fixed(self.session).u32(self.seq).u32(0).u32(0)
                    .u32(0).b)] + ops
            self.seq += 1
        p = Packer().opaque(b"nfsraw").u32(minor).u32(len(ops))
        for op, args in ops:
            p.u32(op).fixed(bytes(args))
        u = self.rpc.call(bytes(p.b))
        status = u.u32()
        u.opaque()  # tag
        n = u.u32()
        res = []
        for k in range(n):
            op, st = u.u32(), u.u32()
            res.append((op, st, u))
            if k < n - 1 and st == 0:
                skip_result(op, u)
        return status, res

    def exchange_id(self, flags):
        owner = b"nfsraw-" + os.urandom(8).hex().encode()
        args = Packer().fixed(os.urandom(8)).opaque(owner).u32(flags).u32(0).u32(0).b
        status, res = self.compound([(OP_EXCHANGE_ID, args)], minor=1)
        if status != 0:
            raise SystemExit(f"nfsraw: EXCHANGE_ID failed: {status_name(status)}")
        u = res[-1][2]
        clientid, seqid, eir_flags = u.u64(), u.u32(), u.u32()
        return clientid, seqid, eir_flags

    def create_session(self, clientid, seqid):
        attrs = Packer().u32(0).u32(1 << 20).u32(1 << 20).u32(4096).u32(16).u32(1).u32(0).b
        args = Packer().u64(clientid).u32(seqid).u32(0).fixed(bytes(attrs)).fixed(bytes(attrs))
        args.u32(0x40000000).u32(1).u32(0)  # cb program, one AUTH_NONE sec parm
        status, res = self.compound([(OP_CREATE_SESSION, args.b)])
        if status != 0:
            raise SystemExit(f"nfsraw: CREATE_SESSION failed: {status_name(status)}")
        self.session = bytes(res[-1][2].fixed(16))

    def walk(self, path):
        ops = [(OP_PUTROOTFH, b"")]
        for c in [c for c in path.split("/") if c]:
            ops.append((OP_LOOKUP, Packer().opaque(c.encode()).b))
        return ops


def skip_result(op, u):
    if op == OP_SEQUENCE:
        u.fixed(16)
        for _ in range(5):
            u.u32()
    elif op in (OP_PUTROOTFH, OP_LOOKUP):
        pass
    else:
        raise SystemExit(f"nfsraw: cannot skip the result of op {op}")


ANON_STATEID = b"\0" * 16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--minor", type=int, default=1, choices=(0, 1))
    p.add_argument("cmd")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    if a.cmd == "exchange-id":
        c = Client(a.port, 0)
        _, _, flags = c.exchange_id(int(a.args[0], 0))
        print(f"0x{flags:08x}")
        return
    c = Client(a.port, a.minor)
    if a.cmd == "setattr-mode":
        attrs = Packer().u32(2).u32(0).u32(1 << (FATTR4_MODE - 32))
        attrs.opaque(struct.pack(">I", int(a.args[1], 8)))
        ops = c.walk(a.args[0]) + [(OP_SETATTR, ANON_STATEID + bytes(attrs.b))]
        status, res = c.compound(ops)
        if res[-1][0] != OP_SETATTR:
            raise SystemExit(f"nfsraw: SETATTR not reached: {status_name(status)} at op "
                             f"{res[-1][0]}")
        print(status_name(status))
    elif a.cmd == "read":
        off, count = int(a.args[1], 0), int(a.args[2], 0)
        ops = c.walk(a.args[0]) + [(OP_READ, Packer().fixed(ANON_STATEID).u64(off)
                                              .u32(count).b)]
        status, res = c.compound(ops)
        if res[-1][0] != OP_READ:
            raise SystemExit(f"nfsraw: READ not reached: {status_name(status)} at op "
                             f"{res[-1][0]}")
        if status != 0:
            print(status_name(status), "-", "-")
        else:
            u = res[-1][2]
            eof = u.u32()
            data = u.opaque()
            print(status_name(status), "true" if eof else "false", len(data))
    elif a.cmd == "write":
        args = Packer().fixed(ANON_STATEID).u64(int(a.args[1], 0)).u32(2)  # FILE_SYNC4
        args.opaque(a.args[2].encode())
        status, res = c.compound(c.walk(a.args[0]) + [(OP_WRITE, args.b)])
        if res[-1][0] != OP_WRITE:
            raise SystemExit(f"nfsraw: WRITE not reached: {status_name(status)} at op "
                             f"{res[-1][0]}")
        print(status_name(status))
    else:
        raise SystemExit(f"unknown command {a.cmd}")


if __name__ == "__main__":
    main()
