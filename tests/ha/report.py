#!/usr/bin/env python3
"""Failover figures from the writers' logs (tests/ha/writer.py, tests/ha/smb_writer.py).

    report.py --event unplanned:T0:T1:vip1 --event planned:T1:T2:vip1+vip2 \
        --writer NAME:PROTOCOL:VIP:LOG:LOST ... [--table FILE]

For each event KIND:START:END:MOVED_VIPS (epoch seconds; END = the next event or the end
of the run; the VIPs that moved, joined by +) and each writer, prints the line the benchmark table reads:

    failover <protocol> <kind> resumed_s=<s> errors=<n> lost=<n> estale=<n> [bystander]

resumed_s: unplanned, from the kill to the writer's first acknowledged write after its
outage (the longest gap between acknowledgements, when over 1 s; a write in flight at the
kill may be acknowledged just after it), or its next write when it saw no outage; planned, the longest pause between
two acknowledged writes in the window (the move happens some time after the command). errors: failed operations in the window
that an application on a kernel NFS client would see too (ESTALE, lost open state, I/O
and permission errors); retries: failures a kernel client retries by itself and nfs-rs
reports to its caller (connection reset or refused, an uncertain outcome of an idempotent
WRITE replayed after a reset, NFS4ERR_GRACE / NFS3ERR_JUKEBOX waits) -- they are in
resumed_s, and listed on a second "failover-detail" line; estale: ESTALE errors; lost: acknowledged records missing or different in the
final read-back (from writer.py verify). A JSON summary goes to stdout's last line.
"""

import argparse
import json


RETRY_CLASSES = {"NfsUncertainOutcomeError", "NfsConnectionError", "NfsTimeoutError",
                 "NfsRpcError", "NfsRetryableError",
                 # smb_writer.py: a dropped or silent connection, after which it reconnects
                 # and re-opens (what Windows' SMB client does by itself)
                 "SmbConnectionError", "SmbTimeoutError"}


def is_retry(e):
    if e.get("stale"):
        return False
    return e["err"] in RETRY_CLASSES or (
        e["err"] == "NfsOperationOutcomeError" and "recovery=Retry" in e.get("msg", ""))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--event", action="append", default=[])
    p.add_argument("--writer", action="append", default=[])
    p.add_argument("--table")
    a = p.parse_args()
    lines, summary = [], []
    for ev in a.event:
        kind, t0, t1, moved_vips = ev.split(":")
        t0, t1 = float(t0), float(t1)
        for w in a.writer:
            name, proto, vip, log, lost = w.split(":")
            events = [json.loads(x) for x in open(log)]
            win = [e for e in events if t0 <= e["t"] < t1]
            first_ok = next((e for e in win if e["ok"]), None)
            failed = [e for e in win if not e["ok"]]
            errors = [e for e in failed if not is_retry(e)]
            retries = [e for e in failed if is_retry(e)]
            oks = [e["t"] for e in events if e["ok"] and e["t"] >= t0 - 1 and e["t"] < t1]
            gaps = [b - c for c, b in zip(oks, oks[1:])]
            # unplanned: from the kill to the first acknowledged write after it; planned:
            # the event is the standby command, the pause comes later: the longest gap
            # between two acknowledged writes in the window
            # (a write in flight at the kill may still be acknowledged just after it: an
            # outage is the longest gap between acknowledgements, when over 1 s)
            longest = max(range(len(gaps)), key=gaps.__getitem__) if gaps else None
            if kind == "planned":
                resumed = round(max(gaps), 2) if gaps and first_ok else None
            elif longest is not None and gaps[longest] > 1.0:
                resumed = round(oks[longest + 1] - t0, 2)
            else:
                resumed = round(first_ok["t"] - t0, 2) if first_ok else None
            rec = {
                "protocol": proto, "kind": kind, "writer": name,
                "vip": vip, "moved": vip in moved_vips.split("+"),
                "resumed_s": resumed, "errors": len(errors), "retries": len(retries),
                "estale": sum(1 for e in errors if e.get("stale")),
                "lost": int(lost), "max_gap_s": round(max(gaps), 2) if gaps else None,
                "acked": sum(1 for e in win if e["ok"]),
                "error_kinds": sorted({f'{e["err"]}:{e.get("code", "")}' for e in errors}),
                "retry_kinds": sorted({f'{e["err"]}:{e.get("code", "")}' for e in retries}),
            }
            summary.append(rec)
            tag = "" if rec["moved"] else " bystander"
            lines.append(
                f"failover {proto} {kind} resumed_s={resumed if resumed is not None else 'never'} "
                f"errors={rec['errors']} lost={rec['lost']} estale={rec['estale']}{tag}")
            lines.append(
                f"failover-detail {proto} {kind} writer={name} vip={vip} retries={len(retries)} "
                f"acked={rec['acked']} max_gap_s={rec['max_gap_s']} "
                f"errors={','.join(rec['error_kinds']) or '-'} retried={','.join(rec['retry_kinds']) or '-'}")
    for line in lines:
        print(line)
    if a.table:
        with open(a.table, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
