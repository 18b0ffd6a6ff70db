#!/usr/bin/env python3
"""A minimal raw NFSv4.1 client with a backchannel, for the delegation tests.

Ganesha hands out delegations only to a client whose callback path works; no userspace
client here has one (nfs-rs has no backchannel), so this one speaks just what the tests
need, stdlib only: EXCHANGE_ID, CREATE_SESSION with CREATE_SESSION4_FLAG_CONN_BACK_CHAN
(the server sends CB_COMPOUND calls on the same TCP connection), RECLAIM_COMPLETE,
SEQUENCE, PUTROOTFH, LOOKUP, OPEN (claim null, asking for a read or write delegation),
READ, WRITE, DELEGRETURN, CLOSE; and on the back channel CB_NULL and CB_COMPOUND with
CB_SEQUENCE + CB_RECALL or CB_LAYOUTRECALL (handed to `on_layoutrecall`, for
tests/nfs/pnfs_state.py).

    nfs4deleg.py --port P --export /vol0 hold PATH read|write [options]

opens PATH, prints `granted read|write|none`, then waits for a recall. It prints one
line per event, each with the seconds since the grant: `recalled T`, `returned T`,
`revoked T` (SEQUENCE reports a revoked delegation, or DELEGRETURN/READ answers
NFS4ERR_DELEG_REVOKED/EXPIRED), and exits after `--after` seconds past the recall (or
the revocation). `--on-recall ignore` answers CB_RECALL but never returns the delegation
(the client keeps renewing its lease, so only the delegation is revoked). `--write DATA`
writes DATA at offset 0 once the delegation is granted; `--late DATA` holds DATA back
and writes it (after --write) only when the delegation is recalled, before DELEGRETURN,
as a client with a write-back cache flushes. Nothing here is specific to Cairn.
"""

import argparse
import os
import socket
import struct
import sys
import threading
import time

from xdr import Packer as P, Unpacker as U, accepted, call_header, record, recv_record

PROG_NFS, CB_PROG = 100003, 0x40000000
OP = {"CLOSE": 4, "DELEGRETURN": 8, "GETFH": 10, "LOOKUP": 15, "OPEN": 18, "PUTFH": 22,
      "PUTROOTFH": 24, "READ": 25, "WRITE": 38, "EXCHANGE_ID": 42, "CREATE_SESSION": 43,
      "SEQUENCE": 53, "RECLAIM_COMPLETE": 58, "DESTROY_SESSION": 44, "DESTROY_CLIENTID": 57}
CB_SEQUENCE, CB_RECALL, CB_LAYOUTRECALL = 11, 4, 5
NFS4ERR_DELAY, NFS4ERR_GRACE = 10008, 10013
REVOKED_ERRS = {10011: "NFS4ERR_EXPIRED", 10087: "NFS4ERR_DELEG_REVOKED",
                10025: "NFS4ERR_BAD_STATEID", 10023: "NFS4ERR_STALE_STATEID",
                10024: "NFS4ERR_OLD_STATEID"}
SEQ4_STATUS_REVOKED = 0x20 | 0x40 | 0x80  # EXPIRED_SOME/ALL_STATE_REVOKED, RECALLABLE_…
WANT = {"read": 0x0100, "write": 0x0200}  # OPEN4_SHARE_ACCESS_WANT_READ/WRITE_DELEG
ACCESS = {"read": 1, "write": 3}


class Nfs4Error(Exception):
    def __init__(self, status, op):
        self.status, self.op = status, op
        super().__init__(f"{op}: status {status}")


def stateid(u):
    return u.fixed(16)


class Client:
    def __init__(self, port, export, name, host="127.0.0.1", minor=1):
        self.export, self.name, self.minor = export.strip("/"), name, minor
        self.sock = socket.create_connection((host, port), timeout=None)
        self.send_lock = threading.Lock()
        self.call_lock = threading.Lock()  # one slot: one compound at a time
        self.xid = int.from_bytes(os.urandom(4), "big")
        self.replies = {}
        self.cv = threading.Condition()
        self.closed = False
        self.on_recall = None  # callback(stateid, fh) run on its own thread
        # callback(recall) for a CB_LAYOUTRECALL, run on its own thread; recall is a dict:
        # type, iomode, changed, kind (file, fsid, all), and fh, offset, length, stateid
        # (file) or fsid (fsid)
        self.on_layoutrecall = None
        self.seq_flags = 0
        self.sessionid = None
        self.slot_seq = 0
        threading.Thread(target=self._reader, daemon=True).start()
        self._session()

    # --- transport ---------------------------------------------------------------------
    def _send(self, msg):
        with self.send_lock:
            self.sock.sendall(record(msg))

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.name}: server closed the connection")
            buf += chunk
        return buf

    def _reader(self):
        try:
            while True:
                u = U(recv_record(self._recv))
                xid, mtype = u.u32(), u.u32()
                if mtype == 1:
                    with self.cv:
                        self.replies[xid] = u
                        self.cv.notify_all()
                else:
                    self._callback(xid, u)
        except (ConnectionError, OSError):
            with self.cv:
                self.closed = True
                self.cv.notify_all()

    def _callback(self, xid, u):
        """A call on the back channel: CB_NULL or CB_COMPOUND (CB_SEQUENCE, CB_RECALL)."""
        u.u32()  # rpcvers
        prog, _vers, proc = u.u32(), u.u32(), u.u32()
        u.u32()
        u.opaque()  # cred
        u.u32()
        u.opaque()  # verifier
        r = P().u32(xid).u32(1).u32(0).u32(0).opaque(b"").u32(0)  # accepted, SUCCESS
        if prog != CB_PROG or proc == 0:
            self._send(bytes(r.b))
            return
        tag = u.opaque()
        u.u32()  # minorversion
        u.u32()  # callback_ident
        results = P()
        nres = 0
        recalls = []
        layout_recalls = []
        for _ in range(u.u32()):
            op = u.u32()
            if op == CB_SEQUENCE:
                sid, seq, slot, high = u.fixed(16), u.u32(), u.u32(), u.u32()
                u.u32()  # cachethis
                for _ in range(u.u32()):  # referring_call_lists
                    u.fixed(16)
                    for _ in range(u.u32()):
                        u.u32()
                        u.u32()
                results.u32(op).u32(0).fixed(sid).u32(seq).u32(slot).u32(high).u32(high)
            elif op == CB_RECALL:
                sd, _trunc, fh = stateid(u), u.u32(), u.opaque()
                recalls.append((sd, fh))
                results.u32(op).u32(0)
            elif op == CB_LAYOUTRECALL:  # RFC 8881 §20.3
                lr = {"type": u.u32(), "iomode": u.u32(), "changed": u.u32()}
                kind = u.u32()
                lr["kind"] = {1: "file", 2: "fsid", 3: "all"}.get(kind, str(kind))
                if kind == 1:
                    lr["fh"], lr["offset"], lr["length"] = u.opaque(), u.u64(), u.u64()
                    lr["stateid"] = stateid(u)
                elif kind == 2:
                    lr["fsid"] = (u.u64(), u.u64())
                layout_recalls.append(lr)
                results.u32(op).u32(0)
            else:  # not expected: answer NFS4ERR_NOTSUPP and stop
                results.u32(op).u32(10004)
                nres += 1
                break
            nres += 1
        r.u32(0).opaque(tag).u32(nres)
        r.b += results.b
        self._send(bytes(r.b))
        for sd, fh in recalls:
            if self.on_recall:
                threading.Thread(target=self.on_recall, args=(sd, fh), daemon=True).start()
        for lr in layout_recalls:
            if self.on_layoutrecall:
                threading.Thread(target=self.on_layoutrecall, args=(lr,), daemon=True).start()

    def _rpc(self, body):
        with self.cv:
            self.xid = (self.xid + 1) & 0xFFFFFFFF
            xid = self.xid
        p = call_header(xid, PROG_NFS, 4, 1, "cairn-deleg")
        self._send(bytes(p.b) + body)
        with self.cv:
            while xid not in self.replies:
                if self.closed:
                    raise ConnectionError(f"{self.name}: connection closed")
                self.cv.wait()
            u = self.replies.pop(xid)
        if u.u32() != 0:
            raise RuntimeError(f"{self.name}: RPC call denied")
        if accepted(u) != 0:
            raise RuntimeError(f"{self.name}: RPC call not accepted")
        return u

    # --- compounds ---------------------------------------------------------------------
    def compound(self, ops, sequence=True):
        """ops: (name, args packer or None, parser or None). Returns the parsed results
        (without SEQUENCE's); raises Nfs4Error for the first op that fails."""
        with self.call_lock:
            if sequence:
                self.slot_seq += 1
                seq = P().fixed(self.sessionid).u32(self.slot_seq).u32(0).u32(0).u32(0)
                ops = [("SEQUENCE", seq, self._parse_sequence)] + ops
            p = P().opaque("").u32(self.minor).u32(len(ops))
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
        return out[1:] if sequence else out

    def destroy(self):
        """DESTROY_SESSION, then DESTROY_CLIENTID (the client holds no state any more): the
        server forgets it now, not when its lease expires (a Ganesha 4.3 client that
        expires after a layout recall makes its reaper spin, docs/nfs.md)."""
        self.compound([("DESTROY_SESSION", P().fixed(self.sessionid), None)], sequence=False)
        self.compound([("DESTROY_CLIENTID", P().u64(self.clientid), None)], sequence=False)

    def _parse_sequence(self, u):
        u.fixed(16)
        for _ in range(4):
            u.u32()
        self.seq_flags = u.u32()

    def _session(self):
        owner = f"cairn-deleg-{self.name}-{os.getpid()}-{os.urandom(4).hex()}"
        p = P().fixed(os.urandom(8)).opaque(owner).u32(0).u32(0).u32(0)

        def parse_eid(u):
            cid, seq = u.u64(), u.u32()
            u.u32()
            u.u32()  # SP4_NONE
            u.u64()
            u.opaque()
            u.opaque()
            for _ in range(u.u32()):
                u.opaque()
                u.opaque()
                u.u64()
                u.u32()
            return cid, seq
        (cid, seq), = self.compound([("EXCHANGE_ID", p, parse_eid)], sequence=False)
        self.clientid = cid
        p = P().u64(cid).u32(seq).u32(0x2)  # CREATE_SESSION4_FLAG_CONN_BACK_CHAN
        for _ in range(2):  # fore, back channel attributes
            p.u32(0).u32(1 << 20).u32(1 << 20).u32(8192).u32(16).u32(1).u32(0)
        p.u32(CB_PROG).u32(1).u32(0)  # one callback security: AUTH_NONE

        def parse_cs(u):
            sid = u.fixed(16)
            u.u32()
            return sid, u.u32()
        (self.sessionid, flags), = self.compound([("CREATE_SESSION", p, parse_cs)],
                                                 sequence=False)
        if not flags & 0x2:
            raise RuntimeError(f"{self.name}: the server did not take the back channel")
        self.compound([("RECLAIM_COMPLETE", P().u32(0), None)])

    def _path_ops(self, path):
        ops = [("PUTROOTFH", None, None)]
        for c in (self.export + "/" + path.strip("/")).split("/"):
            if c:
                ops.append(("LOOKUP", P().opaque(c), None))
        return ops

    def open(self, path, mode):
        """OPEN path (relative to the export; created if missing), share access `mode`
        (read or write = both), asking for a delegation of that kind. Returns (fh, open
        stateid, delegation type name, delegation stateid)."""
        parts = path.strip("/").split("/")
        ops = self._path_ops("/".join(parts[:-1]))
        p = P().u32(0).u32(ACCESS[mode] | WANT[mode]).u32(0)
        p.u64(0).opaque(f"{self.name}-open-{os.urandom(4).hex()}")
        if mode == "write":
            p.u32(1).u32(0).u32(2).u32(0).u32(1 << 1).opaque(struct.pack(">I", 0o644))
        else:
            p.u32(0)
        p.u32(0).opaque(parts[-1])  # CLAIM_NULL
        ops += [("OPEN", p, _parse_open), ("GETFH", None, lambda u: u.opaque())]
        res = self.compound_retry(ops)
        (sd, dtype, dsd), fh = res[-2], res[-1]
        return fh, sd, dtype, dsd

    def compound_retry(self, ops, tries=60):
        for _ in range(tries):
            try:
                return self.compound(ops)
            except Nfs4Error as e:
                if e.status not in (NFS4ERR_DELAY, NFS4ERR_GRACE):
                    raise
                time.sleep(0.5)
        return self.compound(ops)

    def write(self, fh, sd, data, offset=0, stable=0):
        p = P().fixed(sd).u64(offset).u32(stable).opaque(data)

        def parse(u):
            n = u.u32()
            u.u32()
            u.fixed(8)
            return n
        return self.compound_retry([("PUTFH", P().opaque(fh), None), ("WRITE", p, parse)])[-1]

    def read(self, fh, sd, offset=0, count=65536):
        def parse(u):
            u.u32()
            return u.opaque()
        p = P().fixed(sd).u64(offset).u32(count)
        return self.compound_retry([("PUTFH", P().opaque(fh), None), ("READ", p, parse)])[-1]

    def delegreturn(self, fh, dsd):
        self.compound([("PUTFH", P().opaque(fh), None), ("DELEGRETURN", P().fixed(dsd), None)])

    def close(self, fh, sd):
        self.compound([("PUTFH", P().opaque(fh), None),
                       ("CLOSE", P().u32(0).fixed(sd), stateid)])

    def renew(self):
        self.compound([])


def _parse_open(u):
    sd = stateid(u)
    u.u32()
    u.u64()
    u.u64()  # change_info4
    u.u32()  # rflags
    for _ in range(u.u32()):
        u.u32()  # attrset
    dtype = u.u32()
    dsd = None
    if dtype in (1, 2):  # OPEN_DELEGATE_READ / WRITE
        dsd = stateid(u)
        u.u32()  # recall
        if dtype == 2:
            if u.u32() == 1:
                u.u64()
            else:
                u.u32()
                u.u32()
        u.u32()
        u.u32()
        u.u32()
        u.opaque()  # permissions ace
    elif dtype == 3 and u.u32() in (1, 2):  # OPEN_DELEGATE_NONE_EXT: why, + bool
        u.u32()
    return sd, {1: "read", 2: "write"}.get(dtype, "none"), dsd


def hold(args):
    c = Client(args.port, args.export, f"hold-{args.mode}")
    fh, sd, dtype, dsd = c.open(args.path, args.mode)
    t0 = time.monotonic()
    out = sys.stdout

    def say(what):
        print(f"{what} {time.monotonic() - t0:.1f}", file=out, flush=True)
    print(f"granted {dtype}", file=out, flush=True)
    if args.write is not None:
        c.write(fh, sd, args.write.encode())
    done = threading.Event()
    revoked = threading.Event()
    recalled = threading.Event()

    def on_recall(rsd, rfh):
        say("recalled")
        recalled.set()
        if args.on_recall == "ignore":
            return
        try:
            if args.late is not None:
                base = len(args.write.encode()) if args.write is not None else 0
                c.write(fh, sd, args.late.encode(), offset=base)
            c.delegreturn(fh, dsd)
            say("returned")
        except Nfs4Error as e:
            if e.status in REVOKED_ERRS:
                say("revoked")
                revoked.set()
            else:
                say(f"return-failed-{e.status}")
        done.set()
    c.on_recall = on_recall
    if args.ready:
        with open(args.ready, "w") as f:
            f.write("ready\n")
    deadline = time.monotonic() + args.timeout
    recall_seen_at = None
    while time.monotonic() < deadline:
        time.sleep(1)
        try:
            c.renew()
        except Nfs4Error as e:
            say(f"renew-failed-{e.status}")
            break
        if dsd is not None and c.seq_flags & SEQ4_STATUS_REVOKED and not revoked.is_set():
            say("revoked")
            revoked.set()
        # Ganesha sets no SEQUENCE flag for a revoked delegation: it forgets the state,
        # so its stateid stops working.
        if dsd is not None and recalled.is_set() and not done.is_set() and not revoked.is_set():
            try:
                c.compound([("PUTFH", P().opaque(fh), None),
                            ("READ", P().fixed(dsd).u64(0).u32(1), None)])
            except Nfs4Error as e:
                if e.status in REVOKED_ERRS:
                    say("revoked")
                    revoked.set()
        if recall_seen_at is None and (done.is_set() or revoked.is_set()):
            recall_seen_at = time.monotonic()
        if recall_seen_at is not None and time.monotonic() - recall_seen_at >= args.after:
            break
    try:
        c.close(fh, sd)
    except Nfs4Error as e:
        say(f"close-failed-{e.status}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--export", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hold")
    h.add_argument("path")
    h.add_argument("mode", choices=["read", "write"])
    h.add_argument("--on-recall", choices=["return", "ignore"], default="return")
    h.add_argument("--write")
    h.add_argument("--late")
    h.add_argument("--ready", help="file written once the open is done")
    h.add_argument("--after", type=float, default=1.0)
    h.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    return hold(args)


if __name__ == "__main__":
    sys.exit(main())
