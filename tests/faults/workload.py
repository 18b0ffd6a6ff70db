#!/usr/bin/env python3
"""Workload driver of the fault suite, on libcairn (ctypes).

    workload.py run    --lib libcairn.so --servers IP:PORT,... --volume V --mode writes|renames
                       --seed S --client NAME --duration SECS --history H.jsonl
    workload.py verify --lib ... --servers ... --volume V --mode writes|renames --history H.jsonl...

`run` drives operations and records every one of them, one JSON line each, with the time of
the call and of the answer (CLOCK_MONOTONIC ns, shared by every process on the host, so the
histories of clients in different namespaces merge), the outcome and the value.

Mode `writes`: files w/f0..f{F-1}, each an array of BLOCKS registers of BS bytes. Writer
threads (mount A) write whole blocks with `cairn_write_through` (acknowledged = on every
live replica); reader threads (mount B, so no shared client cache) read whole blocks. A
block value is a 64-bit op id repeated over the block (0 = never written), so a torn read
is told apart from a stale one.

Mode `renames`: one thread renames files between names r/a/x*, r/b/x* (two directories,
so renames cross replica sets), each file holding its own tag; an op that failed is
resolved by looking at both names afterwards. A second thread keeps writing blocks.

`verify` reads everything back through a fresh mount, appends those reads to the history
(mode writes) and runs the linearizability check (lincheck.py), or compares the namespace
with the model (mode renames). Exit 0 only if everything holds.
"""

import argparse
import ctypes
import errno
import json
import os
import random
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lincheck  # noqa: E402

FILES = 4
BLOCKS = 8
BS = 512
RNAMES = 12  # names per rename directory
RFILES = 8  # files taking part in the rename storm


class Id(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint8 * 16)]


class Cairn:
    def __init__(self, lib):
        self.lib = ctypes.CDLL(lib)
        L = self.lib
        L.cairn_last_error_message.restype = ctypes.c_char_p
        L.cairn_id_root.restype = Id
        L.cairn_read.restype = ctypes.c_ssize_t
        L.cairn_write_through.restype = ctypes.c_ssize_t
        for f in ("cairn_read", "cairn_write_through"):
            getattr(L, f).argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        L.cairn_lookup.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_char_p, ctypes.c_void_p]
        L.cairn_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p]
        L.cairn_mkdir.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_void_p]
        L.cairn_rename.argtypes = [ctypes.c_void_p, ctypes.c_void_p, Id, ctypes.c_char_p, Id, ctypes.c_char_p, ctypes.c_uint32]
        L.cairn_lookup_path.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        L.cairn_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        L.cairn_unmount.argtypes = [ctypes.c_void_p]
        self.root = L.cairn_id_root()

    def err(self):
        m = self.lib.cairn_last_error_message()
        return m.decode(errors="replace") if m else ""

    def mount(self, servers, volume):
        fs = ctypes.c_void_p()
        r = self.lib.cairn_mount(servers.encode(), volume.encode(), None, ctypes.byref(fs))
        if r != 0:
            raise OSError(-r, f"cairn_mount {volume} via {servers}: {self.err()}")
        return fs

    def _attr(self):
        return ctypes.create_string_buffer(512)

    def _id(self, buf):
        i = Id()
        ctypes.memmove(ctypes.byref(i), buf, 16)
        return i

    def check(self, r, what):
        if r < 0:
            raise OSError(-r, f"{what}: {self.err()}")
        return r

    def lookup(self, fs, d, name):
        a = self._attr()
        self.check(self.lib.cairn_lookup(fs, None, d, name.encode(), a), f"lookup {name}")
        return self._id(a)

    def lookup_path(self, fs, path):
        a = self._attr()
        self.check(self.lib.cairn_lookup_path(fs, None, path.encode(), a), f"lookup_path {path}")
        return self._id(a)

    def mkdir_p(self, fs, d, name):
        a = self._attr()
        r = self.lib.cairn_mkdir(fs, None, d, name.encode(), 0o755, a)
        if r == -errno.EEXIST:
            return self.lookup(fs, d, name)
        self.check(r, f"mkdir {name}")
        return self._id(a)

    def create(self, fs, d, name):
        a = self._attr()
        self.check(self.lib.cairn_create(fs, None, d, name.encode(), 0o644, 0, a), f"create {name}")
        return self._id(a)

    def read(self, fs, i, off, n):
        buf = ctypes.create_string_buffer(n)
        r = self.check(self.lib.cairn_read(fs, None, i, off, buf, n), "read")
        return buf.raw[:r]

    def write(self, fs, i, off, data):
        return self.check(self.lib.cairn_write_through(fs, None, i, off, data, len(data)), "write_through")

    def rename(self, fs, sd, s, dd, d):
        return self.check(self.lib.cairn_rename(fs, None, sd, s.encode(), dd, d.encode(), 0), f"rename {s} -> {d}")


def now():
    return time.monotonic_ns()


def encode(v):
    return struct.pack("<Q", v) * (BS // 8)


def decode(b):
    b = b + bytes(BS - len(b))
    words = set(struct.unpack("<%dQ" % (BS // 8), b))
    if len(words) == 1:
        return words.pop()
    return "torn:" + ",".join(str(w) for w in sorted(words))


class History:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.inflight = {}  # thread -> record of the op it waits on

    def begin(self, rec):
        with self.lock:
            self.inflight[threading.get_ident()] = rec
        return rec

    def add(self, rec):
        with self.lock:
            self.inflight.pop(threading.get_ident(), None)
            self.f.write(json.dumps(rec) + "\n")

    def abandon(self):
        """Record ops that never returned as failed (outcome unknown) and hung."""
        with self.lock:
            hung = list(self.inflight.values())
            self.inflight.clear()
            for rec in hung:
                rec.update(ret=None, ok=False, hung=True, err="no answer before the driver gave up")
                self.f.write(json.dumps(rec) + "\n")
        return hung


def retry(fn, tries=60):
    for n in range(tries):
        try:
            return fn()
        except OSError:
            if n == tries - 1:
                raise
            time.sleep(0.5)


def setup_writes(c, fs):
    w = retry(lambda: c.mkdir_p(fs, c.root, "w"))
    return [retry(lambda n=n: c.create(fs, w, f"f{n}")) for n in range(FILES)]


def writer(c, fs, ids, hist, rng, cid, tid, stop, stats):
    seq = 0
    while not stop.is_set():
        f, b = rng.randrange(FILES), rng.randrange(BLOCKS)
        seq += 1
        v = (cid << 48) | (tid << 40) | seq
        rec = hist.begin({"c": cid, "t": tid, "op": "w", "k": f"f{f}:{b}", "v": v, "call": now()})
        try:
            c.write(fs, ids[f], b * BS, encode(v))
            rec.update(ret=now(), ok=True)
            stats["w_ok"] += 1
        except OSError as e:
            rec.update(ret=now(), ok=False, err=str(e))
            stats["w_err"] += 1
        hist.add(rec)
        time.sleep(rng.random() * 0.01)


def reader(c, fs, ids, hist, rng, cid, tid, stop, stats):
    while not stop.is_set():
        f, b = rng.randrange(FILES), rng.randrange(BLOCKS)
        rec = hist.begin({"c": cid, "t": tid, "op": "r", "k": f"f{f}:{b}", "call": now()})
        try:
            data = c.read(fs, ids[f], b * BS, BS)
            rec.update(ret=now(), ok=True, v=decode(data))
            stats["r_ok"] += 1
        except OSError as e:
            rec.update(ret=now(), ok=False, err=str(e))
            stats["r_err"] += 1
        hist.add(rec)
        time.sleep(rng.random() * 0.01)


def setup_renames(c, fs):
    r = retry(lambda: c.mkdir_p(fs, c.root, "r"))
    dirs = {d: retry(lambda d=d: c.mkdir_p(fs, r, d)) for d in ("a", "b")}
    return dirs


def tag_of(c, fs, d, name):
    """The tag stored in d/name, or None when the name does not exist."""
    try:
        i = c.lookup(fs, d, name)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    data = c.read(fs, i, 0, 8)
    return struct.unpack("<Q", data)[0] if len(data) == 8 else -1


def renamer(c, fs, dirs, hist, rng, cid, stop, stats):
    # Model: name -> tag. Start: RFILES files spread over both directories.
    model = {}
    names = [(d, f"x{n}") for n in range(RNAMES) for d in ("a", "b")]
    for n in range(RFILES):
        d, nm = names[n]
        tag = (cid << 48) | (0xFF << 40) | n
        i = retry(lambda: c.create(fs, dirs[d], nm))
        retry(lambda: c.write(fs, i, 0, struct.pack("<Q", tag)))
        model[(d, nm)] = tag
    hist.add({"c": cid, "op": "rinit", "model": [[d, n, t] for (d, n), t in model.items()]})
    while not stop.is_set():
        src = rng.choice(sorted(model))
        free = [n for n in names if n not in model]
        # Mostly to a free name (files survive), sometimes onto another file (replace).
        replace = len(model) > RFILES // 2 and rng.random() < 0.15
        dst = rng.choice(names) if replace or not free else rng.choice(free)
        if dst == src:
            continue
        rec = hist.begin({"c": cid, "op": "rename", "src": list(src), "dst": list(dst), "call": now()})
        try:
            c.rename(fs, dirs[src[0]], src[1], dirs[dst[0]], dst[1])
            rec.update(ret=now(), ok=True)
            stats["mv_ok"] += 1
            applied = True
        except OSError as e:
            rec.update(ret=now(), ok=False, err=str(e))
            stats["mv_err"] += 1
            # Resolve: which of the two names holds the tag now?
            tag = model[src]
            try:
                s = retry(lambda: tag_of(c, fs, dirs[src[0]], src[1]))
                d = retry(lambda: tag_of(c, fs, dirs[dst[0]], dst[1]))
            except OSError as e2:
                rec["resolve_err"] = str(e2)
                hist.add(rec)
                raise
            if d == tag and s is None:
                applied = True
            elif s == tag:
                applied = False
            else:
                rec["resolved"] = f"neither: src has {s}, dst has {d}, expected {tag}"
                hist.add(rec)
                stats["mv_lost"] += 1
                return
            rec["resolved"] = "applied" if applied else "not applied"
        if applied:
            model[dst] = model.pop(src)
        rec["model"] = [[d, n, t] for (d, n), t in sorted(model.items())]
        hist.add(rec)


def cmd_run(a):
    rng = random.Random(f"{a.seed}:{a.client}")
    cid = int.from_bytes(a.client.encode()[-2:], "big") & 0xFFFF
    c = Cairn(a.lib)
    hist = History(a.history)
    hist.add({"op": "meta", "client": a.client, "cid": cid, "seed": a.seed, "mode": a.mode, "start": now()})
    fs_w = retry(lambda: c.mount(a.servers, a.volume))
    fs_r = retry(lambda: c.mount(a.servers, a.volume))
    stats = {k: 0 for k in ("w_ok", "w_err", "r_ok", "r_err", "mv_ok", "mv_err", "mv_lost")}
    stop = threading.Event()
    threads = []
    ids = setup_writes(c, fs_w)
    writers = a.writers
    readers = a.readers
    if a.mode == "renames":
        dirs = setup_renames(c, fs_w)
        threads.append(threading.Thread(target=renamer, args=(c, fs_w, dirs, hist, random.Random(rng.random()), cid, stop, stats)))
        writers = 1
    for t in range(writers):
        threads.append(threading.Thread(target=writer, args=(c, fs_w, ids, hist, random.Random(rng.random()), cid, t, stop, stats)))
    for t in range(readers):
        threads.append(threading.Thread(target=reader, args=(c, fs_r, ids, hist, random.Random(rng.random()), cid, 100 + t, stop, stats)))
    for t in threads:
        t.start()
    print(f"{a.client}: seed {a.seed}, {len(threads)} threads, {a.duration}s", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.duration:
        time.sleep(1)
        print(f"{a.client}: t={time.monotonic() - t0:.0f}s {stats}", flush=True)
    stop.set()
    deadline = time.monotonic() + a.grace
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))
    hung = hist.abandon()
    for rec in hung:
        print(f"{a.client}: HUNG op (no answer {a.grace:.0f}s after the run ended): {json.dumps(rec)}", flush=True)
    print(f"{a.client}: done {stats}, {len(hung)} ops hung", flush=True)
    # The volume is not unmounted: a write stuck in a retry loop must not hang the exit.
    os._exit(0)


def bulk_data(name, seed):
    return (f"{name}:{seed};".encode() * 512)[:4096]


def cmd_bulk(a):
    """Create COUNT files bulk/bN with known contents (a heal backlog); record them."""
    c = Cairn(a.lib)
    hist = History(a.history)
    fs = retry(lambda: c.mount(a.servers, a.volume))
    d = retry(lambda: c.mkdir_p(fs, c.root, "bulk"))
    made = 0
    for n in range(a.count):
        name = f"b{n}"
        i = retry(lambda: c.create(fs, d, name))
        retry(lambda: c.write(fs, i, 0, bulk_data(name, a.seed)))
        made += 1
    hist.add({"op": "bulk", "count": made, "seed": a.seed})
    print(f"bulk: {made} files", flush=True)
    os._exit(0)


def load(paths):
    recs = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line:
                    recs.append(json.loads(line))
    return recs


def cmd_verify(a):
    c = Cairn(a.lib)
    fs = retry(lambda: c.mount(a.servers, a.volume))
    recs = load(a.history)
    problems = []
    ids = [retry(lambda n=n: c.lookup_path(fs, f"w/f{n}")) for n in range(FILES)]
    final = []
    for f in range(FILES):
        for b in range(BLOCKS):
            t0 = now()
            data = retry(lambda: c.read(fs, ids[f], b * BS, BS))
            final.append({"c": -1, "t": -1, "op": "r", "k": f"f{f}:{b}", "v": decode(data), "call": t0, "ret": now(), "ok": True, "final": True})
    with open(a.history[0], "a") as out:
        for r in final:
            out.write(json.dumps(r) + "\n")
    for r in recs:
        if r.get("hung"):
            problems.append(r)
            print("HUNG OP (never answered; the client library retries for 30 s at most):", json.dumps(r))
    ops = [r for r in recs if r.get("op") in ("w", "r") and not (r.get("hung") and r["op"] == "r")] + final
    res = lincheck.check_history(ops)
    print(f"linearizability: {len(ops)} register ops on {res['keys']} blocks; "
          f"{len(res['violations'])} violations", flush=True)
    t0 = min((r["start"] for r in recs if r.get("op") == "meta"), default=0)

    def fmt(o):
        ret = "never" if o.get("ret") is None else f'{(o["ret"] - t0) / 1e9:.3f}'
        who = "final" if o.get("final") else f'client {o["c"]} thread {o["t"]}'
        return (f'{who}: {o["op"]} v={o.get("v")} call={(o["call"] - t0) / 1e9:.3f}s ret={ret} '
                f'ok={o.get("ok")} {o.get("err", "")[:200]}')

    for v in res["violations"]:
        problems.append(v)
        print(f'VIOLATION on block {v["key"]}: {v["reason"]} (times in s since the first client started)')
        for w in v.get("witnesses", []):
            src = w["returned_value_of"]
            print(f'  stale read: {fmt(w["read"])}\n    returned the value of: {fmt(src) if isinstance(src, dict) else src}'
                  f'\n    overwritten by the acknowledged: {fmt(w["overwritten_by_acked"])}')
        if "first_failure_at" in v:
            print(f'  the history stops being linearizable at {(v["first_failure_at"] - t0) / 1e9:.3f}s; ops on this block before:')
            key_ops = sorted((o for o in ops if o["k"] == v["key"] and o["call"] <= v["first_failure_at"]), key=lambda o: o["call"])
            for o in key_ops[-14:]:
                print("   ", fmt(o))
        for r in v.get("reads", []):
            print("  read:", fmt(r))
        print("  raw:", json.dumps(v)[:1500])
    if a.mode == "renames":
        last = {}
        for r in recs:
            if r.get("op") in ("rinit", "rename") and "model" in r:
                last[r["c"]] = r["model"]
        r_dir = c.lookup_path(fs, "r")
        dirs = {d: c.lookup(fs, r_dir, d) for d in ("a", "b")}
        for cid, model in last.items():
            want = {(d, n): t for d, n, t in model}
            for d in ("a", "b"):
                for n in range(RNAMES):
                    nm = f"x{n}"
                    got = retry(lambda: tag_of(c, fs, dirs[d], nm))
                    exp = want.get((d, nm))
                    if got != exp:
                        problems.append({"rename_model": f"r/{d}/{nm}", "expected": exp, "got": got})
                        print(f"RENAME MODEL MISMATCH r/{d}/{nm}: expected tag {exp}, got {got}")
            print(f"rename model of client {cid}: {len(want)} files checked against {2 * RNAMES} names", flush=True)
        lost = [r for r in recs if r.get("op") == "rename" and str(r.get("resolved", "")).startswith("neither")]
        for r in lost:
            problems.append(r)
            print("RENAME LOST A FILE", json.dumps(r))
    for b in [r for r in recs if r.get("op") == "bulk"]:
        d = c.lookup_path(fs, "bulk")
        bad = 0
        for n in range(b["count"]):
            name = f"b{n}"
            try:
                got = retry(lambda: c.read(fs, c.lookup(fs, d, name), 0, 8192), tries=10)
            except OSError as e:
                got = f"error {e}".encode()
            want = bulk_data(name, b["seed"])
            if got != want:
                bad += 1
                at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
                if bad <= 5:
                    print(f"BULK FILE bulk/{name}: wrong contents: {len(got)} bytes (want {len(want)}), "
                          f"first difference at byte {at}: got {got[at:at + 8]!r}, want {want[at:at + 8]!r}")
        print(f"bulk: {b['count']} files checked, {bad} wrong", flush=True)
        if bad:
            problems.append({"bulk_wrong": bad})
    print("OK" if not problems else f"FAILED: {len(problems)} problems", flush=True)
    os._exit(0 if not problems else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "verify", "bulk"):
        s = sub.add_parser(name)
        s.add_argument("--lib", required=True)
        s.add_argument("--servers", required=True)
        s.add_argument("--volume", required=True)
        s.add_argument("--mode", choices=("writes", "renames"), default="writes")
        if name == "bulk":
            s.add_argument("--seed", type=int, required=True)
            s.add_argument("--count", type=int, default=1000)
            s.add_argument("--history", required=True)
        elif name == "run":
            s.add_argument("--seed", type=int, required=True)
            s.add_argument("--client", required=True)
            s.add_argument("--duration", type=float, default=20)
            s.add_argument("--history", required=True)
            s.add_argument("--writers", type=int, default=2)
            s.add_argument("--readers", type=int, default=2)
            s.add_argument("--grace", type=float, default=40, help="seconds to wait for ops in flight at the end")
        else:
            s.add_argument("--history", action="append", required=True)
    a = p.parse_args()
    return {"run": cmd_run, "verify": cmd_verify, "bulk": cmd_bulk}[a.cmd](a)


if __name__ == "__main__":
    main()
