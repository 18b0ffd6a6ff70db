#!/usr/bin/env python3
"""A small Porcupine-style linearizability checker for registers.

A history is a list of operations, each a dict:
    {"op": "w"|"r", "k": key, "v": value, "call": t0, "ret": t1, "ok": bool}
Writes store `v`; reads returned `v`. Every key is an independent register starting at 0
(linearizability is local, so the keys are checked one by one). A write that failed
(`ok` false) may or may not have taken effect: it is given an infinite return time and
need not be linearized at all. A failed read is dropped. A read value that is not an
integer (e.g. "torn:1,2", a block mixing two writes) is a violation by itself.

The search is Wing & Gong's with Lowe's memoization (Porcupine's algorithm): linearize,
depth first, any pending op whose call precedes the earliest return among the ops not yet
linearized, and remember (linearized set, state) pairs already explored.

`check_history(ops)` returns {"keys": n, "violations": [...]}; each violation names the
key, a reason, witnesses when a simple one exists (a read that returned a value already
overwritten by an acknowledged write before the read began), and the key's operations.
"""

import math
import sys

sys.setrecursionlimit(100000)


class Op:
    __slots__ = ("call", "ret", "kind", "val", "required", "src")

    def __init__(self, call, ret, kind, val, required, src):
        self.call, self.ret, self.kind, self.val, self.required, self.src = call, ret, kind, val, required, src


def _prepare(ops):
    out = []
    read_vals = {o["v"] for o in ops if o["op"] == "r" and o.get("ok")}
    for o in ops:
        if o["op"] == "w":
            if o.get("ok"):
                out.append(Op(o["call"], o["ret"], "w", o["v"], True, o))
            elif o["v"] in read_vals:
                # Outcome unknown: may take effect at any time after its call, or never.
                out.append(Op(o["call"], math.inf, "w", o["v"], False, o))
            # An unknown write whose value nobody read can always be left out.
        elif o["op"] == "r" and o.get("ok"):
            out.append(Op(o["call"], o["ret"], "r", o["v"], True, o))
    out.sort(key=lambda x: (x.call, x.ret))
    return out


def linearizable(ops, init=0):
    """True if the register history `ops` (list of Op) is linearizable."""
    n = len(ops)
    required = 0
    for i, o in enumerate(ops):
        if o.required:
            required |= 1 << i
    memo = set()

    def dfs(done, state):
        if done & required == required:
            return True
        key = (done, state)
        if key in memo:
            return False
        memo.add(key)
        minret = math.inf
        for i in range(n):
            if not (done >> i) & 1 and ops[i].ret < minret:
                minret = ops[i].ret
        for i in range(n):
            if (done >> i) & 1:
                continue
            o = ops[i]
            if o.call > minret:
                break  # sorted by call: no later op can go first either
            if o.kind == "w":
                if dfs(done | (1 << i), o.val):
                    return True
            elif o.val == state:
                if dfs(done | (1 << i), state):
                    return True
        return False

    return dfs(0, init)


def _witnesses(ops):
    """Reads that returned a value overwritten by an acknowledged write before they began."""
    writes = {}
    for o in ops:
        if o.kind == "w":
            writes.setdefault(o.val, o)
    out = []
    for r in ops:
        if r.kind != "r":
            continue
        w = writes.get(r.val)
        for w2 in ops:
            if w2.kind != "w" or not w2.required or w2.val == r.val or w2.ret >= r.call:
                continue
            if w is None or w2.call > w.ret:
                out.append({"read": r.src, "returned_value_of": w.src if w else "initial 0", "overwritten_by_acked": w2.src})
                break
        if len(out) >= 3:
            break
    return out


def _prefix(raw, t):
    """The history as seen at time t: ops called by t; those not answered by then pending."""
    out = []
    for o in raw:
        if o["call"] > t:
            continue
        if o.get("ret") is not None and o["ret"] <= t:
            out.append(o)
        elif o["op"] == "w":
            out.append(dict(o, ok=False))  # pending write: may or may not have applied yet
    return out


def first_failure(raw, init=0):
    """The earliest call or return time at which the history stops being linearizable (binary search;
    linearizability is prefix-closed), and the ops answered or called in the second before."""
    times = sorted({o["call"] for o in raw} | {o["ret"] for o in raw if o.get("ret") is not None})
    lo, hi = 0, len(times) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if linearizable(_prepare(_prefix(raw, times[mid])), init):
            lo = mid + 1
        else:
            hi = mid
    t = times[lo]
    window = [o for o in raw if o["call"] <= t and (o.get("ret") is None or o["ret"] >= t - 1_000_000_000)]
    return t, sorted(window, key=lambda o: o["call"])[-25:]


def check_history(ops, init=0):
    by_key = {}
    for o in ops:
        by_key.setdefault(o["k"], []).append(o)
    violations = []
    for k in sorted(by_key):
        raw = by_key[k]
        bad = [o for o in raw if o["op"] == "r" and o.get("ok") and not isinstance(o["v"], int)]
        if bad:
            violations.append({"key": k, "reason": "torn read (block mixes writes)", "reads": bad[:3]})
            continue
        written = {o["v"] for o in raw if o["op"] == "w"} | {init}
        ghost = [o for o in raw if o["op"] == "r" and o.get("ok") and o["v"] not in written]
        if ghost:
            violations.append({"key": k, "reason": "read a value never written", "reads": ghost[:3]})
            continue
        prepared = _prepare(raw)
        if not linearizable(prepared, init):
            t, window = first_failure(raw, init)
            violations.append({
                "key": k,
                "reason": "not linearizable",
                "witnesses": _witnesses(prepared),
                "first_failure_at": t,
                "ops_before_failure": window,
            })
    return {"keys": len(by_key), "violations": violations}


if __name__ == "__main__":
    import json

    ops = [json.loads(line) for p in sys.argv[1:] for line in open(p) if line.strip()]
    ops = [o for o in ops if o.get("op") in ("w", "r")]
    res = check_history(ops)
    print(json.dumps(res, indent=1)[:20000])
    sys.exit(1 if res["violations"] else 0)
