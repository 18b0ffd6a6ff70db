#!/usr/bin/env python3
"""SMB writer for the gateway failover suite (tests/ha/smb-failover.sh), on smbprotocol.

    smb_writer.py --host VIP --share vol0 --user U --password P --path ha-x \
        --log RES.jsonl --stop-file STOP [--record 4096] [--interval 0.05]

Keeps one file open and writes fixed-size records one after the other at their offsets;
a record is acknowledged only once its WRITE (write-through) and a FLUSH both succeeded.
Every outcome is one JSON line in LOG, in writer.py's format:
  {"t": epoch, "ok": true, "i": N}
  {"t": epoch, "ok": false, "i": N, "err": CLASS, "code": STATUS, "msg": ...}
smbprotocol does not reconnect by itself: on a broken connection (reset, e.g. by the tickle
ACKs of the gateway that took the VIP) or a silent one (no answer within --op-timeout,
60 s like Windows' SessTimeout) this client drops it, connects again to the same address, opens a
new session and tree, re-opens the file and retries the same record -- what a Windows
client does after a failover (a durable handle cannot be reclaimed on another node
without persistent handles, so the open is a new one). Those failures are logged as
SmbConnectionError / SmbTimeoutError (report.py counts them as retries, their time is in
resumed_s); any other failure (an NT status an application would see) counts as an error.

    smb_writer.py verify --host IP ... --path P --log RES.jsonl    (read back over SMB)
    smb_writer.py verify --local DIR --path P --log RES.jsonl      (read back from a mount)

checks every acknowledged record byte for byte; prints "records=N lost=L", exits 1 if any
is missing or differs.

    smb_writer.py sharemode --host A --other B ... --path P

opens P through A sharing read only (deny write), then for writing through B: exits 0 when
B refuses with STATUS_SHARING_VIOLATION (the gateways share Samba's share-mode table:
CTDB), 1 otherwise.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBConnectionClosed, SMBException, SMBResponseException
from smbprotocol.open import (CreateDisposition, CreateOptions, FileAttributes,
                              FilePipePrinterAccessMask, ImpersonationLevel, Open, ShareAccess)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect

from writer import record


class Client:
    """One connection, session, tree and open file; every step bounded by a watchdog."""

    def __init__(self, a):
        self.a = a
        self.conn = None
        self.f = None

    def _watchdog(self):
        conn = self.conn

        def fire():
            try:
                conn.transport.close()  # wakes the worker: pending requests fail
            except Exception:
                pass
        t = threading.Timer(self.a.op_timeout, fire)
        t.daemon = True
        t.start()
        return t

    def bounded(self, fn, *args, **kw):
        t = self._watchdog() if self.conn is not None else None
        start = time.monotonic()
        try:
            return fn(*args, **kw)
        except (SMBConnectionClosed, OSError) as e:
            if time.monotonic() - start >= self.a.op_timeout - 0.5:
                raise TimeoutError(f"no answer within {self.a.op_timeout}s: {e}") from e
            raise
        finally:
            if t is not None:
                t.cancel()

    def open(self, create, share=None):
        a = self.a
        self.conn = Connection(uuid.uuid4(), a.host, 445)
        self.conn.connect(timeout=a.connect_timeout)
        sess = Session(self.conn, a.user, a.password, require_encryption=False)
        self.bounded(sess.connect)
        tree = TreeConnect(sess, rf"\\{a.host}\{a.share}")
        self.bounded(tree.connect)
        self.f = Open(tree, a.path)
        self.bounded(
            self.f.create, ImpersonationLevel.Impersonation,
            FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
            FileAttributes.FILE_ATTRIBUTE_NORMAL,
            share if share is not None else ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE,
            CreateDisposition.FILE_OVERWRITE_IF if create else CreateDisposition.FILE_OPEN_IF,
            CreateOptions.FILE_NON_DIRECTORY_FILE)

    def write(self, i):
        a = self.a
        self.bounded(self.f.write, record(a.path, i, a.record), i * a.record, write_through=True)
        self.bounded(self.f.flush)

    def read(self, offset, length):
        return self.bounded(self.f.read, offset, length)

    def close(self):
        conn, self.conn, self.f = self.conn, None, None
        if conn is not None:
            try:
                conn.disconnect(close=True, timeout=1)
            except Exception:
                try:
                    conn.transport.close()
                except Exception:
                    pass


def classify(e):
    if isinstance(e, SMBResponseException):
        return "SmbStatusError", f"0x{e.status:08x}"
    if isinstance(e, TimeoutError):
        return "SmbTimeoutError", ""
    if isinstance(e, (SMBConnectionClosed, OSError)):
        return "SmbConnectionError", ""
    if isinstance(e, SMBException):
        if "timeout" in str(e).lower():
            return "SmbTimeoutError", ""
        return "SmbConnectionError", ""
    return type(e).__name__, ""


def run(a):
    log = open(a.log, "a", buffering=1)

    def emit(**kv):
        kv["t"] = time.time()
        log.write(json.dumps(kv) + "\n")

    c = Client(a)
    i = 0
    while not os.path.exists(a.stop_file):
        try:
            if c.f is None:
                c.open(create=(i == 0))
            c.write(i)
            emit(ok=True, i=i)
            i += 1
            time.sleep(a.interval)
        except Exception as e:  # noqa: BLE001 -- every failure is logged and retried
            err, code = classify(e)
            emit(ok=False, i=i, err=err, code=code, msg=str(e)[:300])
            c.close()  # a Windows client: reconnect, new session, re-open
            time.sleep(0.2)
    c.close()
    print(f"smb writer {a.path}: {i} records acknowledged")


def verify(a):
    acked = set()
    with open(a.log) as fh:
        for line in fh:
            ev = json.loads(line)
            if ev.get("ok"):
                acked.add(ev["i"])
    lost = []
    if a.local:
        with open(os.path.join(a.local, a.path), "rb") as f:
            for i in sorted(acked):
                want = record(a.path, i, a.record)
                f.seek(i * a.record)
                if f.read(len(want)) != want:
                    lost.append(i)
    else:
        c = Client(a)
        c.open(create=False)
        for i in sorted(acked):
            want = record(a.path, i, a.record)
            if bytes(c.read(i * a.record, len(want))) != want:
                lost.append(i)
        c.close()
    print(f"records={len(acked)} lost={len(lost)}" + (f" first_lost={lost[:5]}" if lost else ""))
    return 1 if lost else 0


def sharemode(a):
    """Open PATH for writing through --host, sharing read only (deny write); then try to
    open it for writing through --other: clustered Samba (CTDB) shares the share mode
    table, so the second open must fail with STATUS_SHARING_VIOLATION."""
    from argparse import Namespace
    first = Client(a)
    first.open(create=True, share=ShareAccess.FILE_SHARE_READ)
    second = Client(Namespace(**{**vars(a), "host": a.other}))
    try:
        second.open(create=False)
    except SMBResponseException as e:
        if e.status == 0xC0000043:
            print(f"second open through {a.other}: STATUS_SHARING_VIOLATION (as expected)")
            return 0
        print(f"second open through {a.other}: 0x{e.status:08x}, want STATUS_SHARING_VIOLATION")
        return 1
    finally:
        second.close()
        first.close()
    print(f"second open through {a.other} succeeded while {a.host} holds it with deny-write:"
          " share modes are not shared between gateways")
    return 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", nargs="?", default="run", choices=["run", "verify", "sharemode"])
    p.add_argument("--host")
    p.add_argument("--local")
    p.add_argument("--other", help="sharemode: the second gateway's address")
    p.add_argument("--share", default="vol0")
    p.add_argument("--user", default="cairnsmb")
    p.add_argument("--password", default="")
    p.add_argument("--path", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--stop-file", default="/nonexistent")
    p.add_argument("--record", type=int, default=4096)
    p.add_argument("--interval", type=float, default=0.05)
    # Windows' SMB client gives a request SessTimeout (60 s) before it drops the connection;
    # reconnecting sooner relies on the server side resetting it (tickle ACKs).
    p.add_argument("--op-timeout", type=float, default=60.0)
    p.add_argument("--connect-timeout", type=float, default=5.0)
    a = p.parse_args()
    if not (a.host or (a.mode == "verify" and a.local)):
        p.error("--host is required (or --local for verify)")
    if a.mode == "verify":
        sys.exit(verify(a))
    if a.mode == "sharemode":
        sys.exit(sharemode(a))
    run(a)


if __name__ == "__main__":
    main()
