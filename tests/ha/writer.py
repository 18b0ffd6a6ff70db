#!/usr/bin/env python3
"""NFS writer for the gateway failover suite (tests/ha), on nfs-rs.

    writer.py --host VIP --version 3|4.0|4.1 --export /vol0 --path /ha-x \
        --log RES.jsonl --stop-file STOP [--record 4096] [--interval 0.05]

Keeps one file open (NFSv4: an OPEN stateid held across the failover) and writes
fixed-size records one after the other at their offsets; each write returns after the
data is stable (nfs-rs commits UNSTABLE writes). Every outcome is one JSON line in LOG:
  {"t": epoch, "ok": true, "i": N}                 record N acknowledged
  {"t": epoch, "ok": false, "i": N, "err": CLASS, "code": NAME, "msg": ...}
After an error it retries the same record: first on the same open file, then after
reopening the file, then on a fresh connection (new client) -- the recovery a kernel
client does by itself. It stops when STOP exists, closes, and prints a summary line.

    writer.py verify --host IP --version V --export E --path P --log RES.jsonl

reads the file through a fresh client and checks every acknowledged record byte for byte;
prints "records=N lost=L" and exits 1 if any is missing or differs.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import nfs_rs


def record(path, i, size):
    seed = hashlib.sha256(f"{path}:{i}".encode()).digest()
    head = f"{path} record {i:08d} ".encode()
    body = (seed * (size // len(seed) + 1))[: size - len(head) - 1]
    return head + body + b"\n"


def connect(a):
    kw = {"versions": [a.version], "uid": 0, "gid": 0,
          "connect_timeout": 5.0, "operation_timeout": a.op_timeout}
    if a.version == "3":
        kw["nfs_port"] = 2049
        kw["mount_port"] = 20048
        return nfs_rs.Client.connect(f"nfs://{a.host}{a.export}", **kw)
    return nfs_rs.Client.connect(f"nfs://{a.host}:2049{a.export}", **kw)


def is_stale(e):
    text = f"{getattr(e, 'code_name', '')} {e}".upper()
    return "STALE" in text and "STALE_CLIENTID" not in text and "STALE_STATEID" not in text


def run(a):
    log = open(a.log, "a", buffering=1)

    def emit(**kv):
        kv["t"] = time.time()
        log.write(json.dumps(kv) + "\n")

    client = f = None
    i = 0
    failures = 0  # consecutive failures of record i
    while not os.path.exists(a.stop_file):
        try:
            if client is None:
                client = connect(a)
            if f is None:
                f = client.open(a.path, "r+b" if i else "w+b")
            f.write_at(record(a.path, i, a.record), i * a.record)
            emit(ok=True, i=i)
            i += 1
            failures = 0
            time.sleep(a.interval)
        except nfs_rs.NfsError as e:
            failures += 1
            emit(ok=False, i=i, err=type(e).__name__, code=str(getattr(e, "code_name", "")),
                 stale=is_stale(e), msg=str(e)[:300])
            # escalate: same file, then reopen, then a new connection
            if failures >= 2 and f is not None:
                try:
                    f.close()
                except Exception:
                    pass
                f = None
            if failures >= 3 and client is not None:
                try:
                    client.close()
                except Exception:
                    pass
                client = None
            time.sleep(0.2)
    try:
        if f is not None:
            f.close()
        if client is not None:
            client.close()
    except nfs_rs.NfsError as e:
        emit(ok=False, i=i, err=type(e).__name__, code="close", stale=is_stale(e), msg=str(e)[:300])
    print(f"writer {a.path} v{a.version}: {i} records acknowledged")


def verify(a):
    acked = set()
    with open(a.log) as fh:
        for line in fh:
            ev = json.loads(line)
            if ev.get("ok"):
                acked.add(ev["i"])
    lost = []
    with connect(a) as c:
        with c.open(a.path, "rb") as f:
            for i in sorted(acked):
                want = record(a.path, i, a.record)
                got = f.read_at(i * a.record, len(want))
                if bytes(got) != want:
                    lost.append(i)
    print(f"records={len(acked)} lost={len(lost)}" + (f" first_lost={lost[:5]}" if lost else ""))
    return 1 if lost else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", nargs="?", default="run", choices=["run", "verify"])
    p.add_argument("--host", required=True)
    p.add_argument("--version", default="4.1")
    p.add_argument("--export", default="/vol0")
    p.add_argument("--path", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--stop-file", default="/nonexistent")
    p.add_argument("--record", type=int, default=4096)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--op-timeout", type=float, default=30.0)
    a = p.parse_args()
    if a.mode == "verify":
        sys.exit(verify(a))
    run(a)


if __name__ == "__main__":
    main()
