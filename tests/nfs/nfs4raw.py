#!/usr/bin/env python3
"""A minimal raw NFSv4.0 / v4.1 client for the share reservation tests.

nfs-rs (nfsclient.py) opens files with share_access BOTH and share_deny NONE and exposes no
stateids, so it cannot ask for a deny mode or READ/WRITE through a chosen stateid. This
client speaks just what those tests need, over TCP with AUTH_SYS as root, packing XDR by
hand with `struct`:

  v4.0: SETCLIENTID, SETCLIENTID_CONFIRM, OPEN (+ OPEN_CONFIRM), READ, WRITE, CLOSE, RENEW
  v4.1: EXCHANGE_ID, CREATE_SESSION, SEQUENCE, RECLAIM_COMPLETE, OPEN, READ, WRITE, CLOSE

Each `Client` is its own NFSv4 client (its own client id), so two `Client`s on one gateway
are two clients as far as the server knows. Errors come back as `Nfs4Error` carrying the
NFS4ERR_* name. Used by tests/nfs/sharemodes.py; nothing here is specific to Cairn.
"""

import os
import socket
import struct

from xdr import Packer, Unpacker, accepted, call_header, record, recv_record

PROG_NFS = 100003

OP = {"ACCESS": 3, "CLOSE": 4, "GETFH": 10, "LOOKUP": 15, "OPEN": 18, "OPEN_CONFIRM": 20,
      "PUTFH": 22, "PUTROOTFH": 24, "READ": 25, "RENEW": 30, "SETCLIENTID": 35,
      "SETCLIENTID_CONFIRM": 36, "WRITE": 38, "EXCHANGE_ID": 42, "CREATE_SESSION": 43,
      "DESTROY_SESSION": 44, "SEQUENCE": 53, "DESTROY_CLIENTID": 57,
      "RECLAIM_COMPLETE": 58}

ERRORS = {0: "NFS4_OK", 1: "NFS4ERR_PERM", 2: "NFS4ERR_NOENT", 5: "NFS4ERR_IO",
          13: "NFS4ERR_ACCESS", 17: "NFS4ERR_EXIST", 22: "NFS4ERR_INVAL",
          10008: "NFS4ERR_DELAY", 10009: "NFS4ERR_SAME", 10010: "NFS4ERR_DENIED",
          10011: "NFS4ERR_EXPIRED", 10012: "NFS4ERR_LOCKED", 10013: "NFS4ERR_GRACE",
          10015: "NFS4ERR_SHARE_DENIED", 10016: "NFS4ERR_WRONGSEC",
          10017: "NFS4ERR_CLID_INUSE", 10020: "NFS4ERR_NOFILEHANDLE",
          10022: "NFS4ERR_STALE_CLIENTID", 10023: "NFS4ERR_STALE_STATEID",
          10024: "NFS4ERR_OLD_STATEID", 10025: "NFS4ERR_BAD_STATEID",
          10026: "NFS4ERR_BAD_SEQID", 10038: "NFS4ERR_OPENMODE",
          10052: "NFS4ERR_BADSESSION", 10053: "NFS4ERR_BADSLOT",
          10063: "NFS4ERR_SEQ_MISORDERED", 10068: "NFS4ERR_RETRY_UNCACHED_REP",
          10071: "NFS4ERR_OP_NOT_IN_SESSION", 10076: "NFS4ERR_SEQUENCE_POS"}

ACCESS = {"none": 0, "read": 1, "write": 2, "both": 3}
DENY = {"none": 0, "read": 1, "write": 2, "both": 3}


class Nfs4Error(Exception):
    def __init__(self, status, op):
        self.status, self.op = status, op
        self.name = ERRORS.get(status, f"NFS4ERR_{status}")
        super().__init__(f"{op}: {self.name}")


class Stateid:
    def __init__(self, seqid, other):
        self.seqid, self.other = seqid, other

    def pack(self, p):
        p.u32(self.seqid).fixed(self.other)

    def __eq__(self, o):
        return (self.seqid, self.other) == (o.seqid, o.other)

    def __repr__(self):
        return f"{self.seqid}:{self.other.hex()}"


ANONYMOUS = Stateid(0, b"\0" * 12)


class Open:
    """An open file: its handle, stateid and (v4.0) open-owner sequence."""

    def __init__(self, fh, stateid, owner, seqid, cinfo=None):
        self.fh, self.stateid, self.owner, self.seqid = fh, stateid, owner, seqid
        # the parent's change_info4 of the OPEN: (atomic, before, after)
        self.cinfo = cinfo


class Client:
    def __init__(self, port, minor, export, name, host="127.0.0.1"):
        self.minor, self.export, self.name = minor, export.strip("/"), name
        self.sock = socket.create_connection((host, port), timeout=30)
        self.xid = int.from_bytes(os.urandom(4), "big")
        self.owners = 0
        self.verifier = os.urandom(8)
        self.clientid = 0
        self.sessionid = None
        self.slot_seq = 0
        self.last_args = None
        if minor == 0:
            self._setclientid()
        else:
            self._create_session()

    # --- RPC ---------------------------------------------------------------------------
    def _rpc(self, body):
        self.xid = (self.xid + 1) & 0xFFFFFFFF
        p = call_header(self.xid, PROG_NFS, 4, 1, "cairn-test")
        self.sock.sendall(record(bytes(p.b) + body))
        u = Unpacker(recv_record(self._recv))
        xid, mtype, rstat = u.u32(), u.u32(), u.u32()
        if xid != self.xid or mtype != 1 or rstat != 0:
            raise RuntimeError(f"{self.name}: bad RPC reply (xid {xid}, stat {rstat})")
        if accepted(u) != 0:
            raise RuntimeError(f"{self.name}: RPC call not accepted")
        return u

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.name}: server closed the connection")
            buf += chunk
        return buf

    def compound(self, ops, replay=False):
        """ops: list of (name, packer-of-args or None, result-parser). Returns the list of
        results; raises Nfs4Error for the first failing op. With a session, prefixes
        SEQUENCE; `replay` resends the previous compound on the same slot and sequence."""
        seq_op = self.sessionid is not None
        if seq_op:
            if not replay:
                self.slot_seq += 1
            seq = Packer().fixed(self.sessionid).u32(self.slot_seq).u32(0).u32(0).u32(1)
            ops = [("SEQUENCE", seq, _skip_sequence)] + ops
        p = Packer().opaque("").u32(self.minor).u32(len(ops))
        for name, args, _ in ops:
            p.u32(OP[name])
            if args is not None:
                p.b += args.b
        u = self._rpc(bytes(p.b))
        status = u.u32()
        u.opaque()
        n = u.u32()
        out = []
        for i in range(n):
            name, _, parse = ops[i]
            if u.u32() != OP[name]:
                raise RuntimeError(f"{self.name}: reply op mismatch at {name}")
            st = u.u32()
            if st != 0:
                raise Nfs4Error(st, name)
            out.append(parse(u) if parse else None)
        if status != 0:
            raise Nfs4Error(status, ops[n - 1][0] if n else "COMPOUND")
        return out[1:] if seq_op else out

    # --- client id ---------------------------------------------------------------------
    def _setclientid(self):
        p = Packer().fixed(self.verifier).opaque(f"cairn-share-{self.name}-{os.getpid()}")
        p.u32(0x40000000).opaque("tcp").opaque("127.0.0.1.0.0").u32(1)

        def parse(u):
            return u.u64(), u.fixed(8)
        (cid, confirm), = self.compound([("SETCLIENTID", p, parse)])
        self.compound([("SETCLIENTID_CONFIRM", Packer().u64(cid).fixed(confirm), None)])
        self.clientid = cid

    def _create_session(self):
        p = Packer().fixed(self.verifier).opaque(f"cairn-share-{self.name}-{os.getpid()}")
        p.u32(0).u32(0).u32(0)  # flags, SP4_NONE, no impl id

        def parse_eid(u):
            cid, seq = u.u64(), u.u32()
            u.u32()
            if u.u32() != 0:
                raise RuntimeError("state protection in EXCHANGE_ID reply")
            u.u64()
            u.opaque()
            u.opaque()
            for _ in range(u.u32()):
                u.opaque()
                u.opaque()
                u.u64()
                u.u32()
            return cid, seq
        (cid, seq), = self.compound([("EXCHANGE_ID", p, parse_eid)])
        self.clientid = cid

        def chan(p):
            p.u32(0).u32(1 << 20).u32(1 << 20).u32(8192).u32(16).u32(1).u32(0)
        p = Packer().u64(cid).u32(seq).u32(0)
        chan(p)
        chan(p)
        p.u32(0x40000000).u32(1).u32(0)  # cb program, one sec parm: AUTH_NONE

        (self.sessionid,), = self.compound([("CREATE_SESSION", p, lambda u: (u.fixed(16),))])
        self.compound([("RECLAIM_COMPLETE", Packer().u32(0), None)])

    def renew(self):
        if self.minor == 0:
            self.compound([("RENEW", Packer().u64(self.clientid), None)])
        else:
            self.compound([])

    # --- files -------------------------------------------------------------------------
    def _dir_ops(self):
        ops = [("PUTROOTFH", None, None)]
        for c in self.export.split("/"):
            if c:
                ops.append(("LOOKUP", Packer().opaque(c), None))
        return ops

    def open(self, path, access, deny, create=False, owner=None, seqid=0):
        """OPEN path (relative to the export) with share_access / share_deny names
        ("read", "write", "both"; deny also "none"). A new open-owner unless `owner`
        (then `seqid` is the owner's next sequence id, v4.0)."""
        if owner is None:
            self.owners += 1
            owner = f"{self.name}-owner-{self.owners}"
        return self._open(path, access, deny, create, owner, seqid)

    def _open(self, path, access, deny, create, owner, seqid, replay=False):
        dirs, name = path.strip("/").rsplit("/", 1) if "/" in path.strip("/") else ("", path.strip("/"))
        ops = self._dir_ops()
        for c in dirs.split("/"):
            if c:
                ops.append(("LOOKUP", Packer().opaque(c), None))
        p = Packer().u32(seqid if self.minor == 0 else 0)
        # v4.1: OPEN4_SHARE_ACCESS_WANT_NO_DELEG. Delegations are on by default (nfs.md) and
        # Ganesha 4.3 offers them to a v4.1 client whatever its backchannel; this client
        # answers no CB_RECALL, so a delegation would turn a conflicting OPEN into
        # NFS4ERR_DELAY until Ganesha revokes it. Share reservations are what it tests.
        want = 0x0400 if self.minor == 1 else 0
        p.u32(ACCESS[access] | want).u32(DENY[deny]).u64(self.clientid).opaque(owner)
        if create:
            # CREATE, UNCHECKED4, mode 0666
            p.u32(1).u32(0).u32(2).u32(0).u32(1 << 1).opaque(struct.pack(">I", 0o666))
        else:
            p.u32(0)
        p.u32(0).opaque(name)  # CLAIM_NULL
        ops += [("OPEN", p, _parse_open), ("GETFH", None, lambda u: u.opaque())]
        self.last_args = (path, access, deny, create, owner, seqid)
        res = self.compound(ops, replay=replay)
        (stateid, rflags, cinfo), fh = res[-2], res[-1]
        o = Open(fh, stateid, owner, seqid + 1, cinfo)
        if self.minor == 0 and rflags & 2:  # OPEN4_RESULT_CONFIRM
            p = Packer()
            stateid.pack(p)
            p.u32(o.seqid)
            o.seqid += 1
            res = self.compound([("PUTFH", Packer().opaque(fh), None),
                                 ("OPEN_CONFIRM", p, _parse_stateid)])
            o.stateid = res[-1]
        return o

    def replay_open(self):
        """Send the last OPEN again unchanged: v4.0 with the same owner and seqid, v4.1
        on the same slot and sequence id (the server answers from its reply cache)."""
        path, access, deny, create, owner, seqid = self.last_args
        return self._open(path, access, deny, create, owner, seqid, replay=True)

    def read(self, o, stateid=None, offset=0, count=4096):
        p = Packer()
        (stateid or o.stateid).pack(p)
        p.u64(offset).u32(count)

        def parse(u):
            u.u32()
            return u.opaque()
        return self.compound([("PUTFH", Packer().opaque(o.fh), None), ("READ", p, parse)])[-1]

    def write(self, o, data, stateid=None, offset=0):
        p = Packer()
        (stateid or o.stateid).pack(p)
        p.u64(offset).u32(2).opaque(data)  # FILE_SYNC4

        def parse(u):
            n = u.u32()
            u.u32()
            u.fixed(8)
            return n
        return self.compound([("PUTFH", Packer().opaque(o.fh), None), ("WRITE", p, parse)])[-1]

    def close(self, o):
        p = Packer().u32(o.seqid if self.minor == 0 else 0)
        o.stateid.pack(p)
        o.seqid += 1
        self.compound([("PUTFH", Packer().opaque(o.fh), None), ("CLOSE", p, _parse_stateid)])

    def shutdown(self):
        try:
            self.sock.close()
        except OSError:
            pass


def _skip_sequence(u):
    u.fixed(16)
    for _ in range(5):
        u.u32()


def _parse_stateid(u):
    return Stateid(u.u32(), u.fixed(12))


def _parse_nfsace(u):
    u.u32()
    u.u32()
    u.u32()
    u.opaque()


def _parse_open(u):
    stateid = _parse_stateid(u)
    cinfo = (u.u32(), u.u64(), u.u64())  # change_info4: atomic, before, after
    rflags = u.u32()
    u.bitmap()
    dtype = u.u32()
    if dtype in (1, 2):  # OPEN_DELEGATE_READ / WRITE
        _parse_stateid(u)
        u.u32()
        if dtype == 2:
            if u.u32() == 1:
                u.u64()
            else:
                u.u32()
                u.u32()
        _parse_nfsace(u)
    elif dtype == 3:  # OPEN_DELEGATE_NONE_EXT
        if u.u32() in (1, 2):
            u.u32()
    return stateid, rflags, cinfo
