#!/usr/bin/env python3
"""NFSv4.0 / v4.1 share reservations against Ganesha gateways (run by sharemodes.sh).

    sharemodes.py --export /vol0 --gw1 PORT [--gw2 PORT] [--kill-gw1 CMD]

Each case opens files with explicit share_access / share_deny through tests/nfs/nfs4raw.py
clients, on one gateway and across two (g1 and g2 over one volume), and checks the
answers a stock server gives: a conflicting OPEN gets NFS4ERR_SHARE_DENIED, a READ or
WRITE without an open that grants it (a special stateid, a READ through a write-only
open) against another open's deny gets NFS4ERR_LOCKED, a replayed OPEN is answered as
the first one, CLOSE lifts the deny. With --kill-gw1, the last case kills g1 (CMD runs
in a shell) while it holds a deny mode and checks that g2 may open the file soon after.
Without --gw2 only the one-gateway cases run (sharemodes.sh runs them against a stock
FSAL_VFS export too, with --stock, so a check the stock server fails shows; --stock
leaves out the replay cases: stock Ganesha 4.3 with FSAL_VFS answers a replayed v4.0
OPEN with deny both NFS4ERR_SHARE_DENIED, where RFC 7530 wants the first answer). Prints one "ok"/"FAIL"
line per check; exits 1 if any failed.
"""

import argparse
import subprocess
import sys
import time

from nfs4raw import ANONYMOUS, Client, Nfs4Error

failures = 0
checks = 0


def outcome(fn):
    try:
        fn()
        return "NFS4_OK"
    except Nfs4Error as e:
        return e.name


def expect(what, want, fn):
    record(what, want, outcome(fn))


def record(what, want, got):
    global failures, checks
    checks += 1
    if got == want:
        print(f"ok - {what}: {got}")
    else:
        failures += 1
        print(f"FAIL - {what}: got {got}, want {want}")


def must(what, fn):
    """A step the case needs (not a check of its own): abort the case on failure."""
    try:
        return fn()
    except Nfs4Error as e:
        raise RuntimeError(f"{what}: {e.name}") from e


def open_cases(tag, a, b, minor):
    """The five OPEN conflicts, A's open first, then B's; and CLOSE lifting A's deny."""
    cases = [
        ("deny-write", ("read", "write"), [(("write", "none"), True), (("read", "none"), False)]),
        ("deny-read", ("read", "read"), [(("read", "none"), True), (("write", "none"), False)]),
        ("deny-both", ("both", "both"), [(("read", "none"), True), (("write", "none"), True)]),
        ("deny-write-vs-writer", ("write", "none"), [(("read", "write"), True),
                                                      (("read", "read"), False)]),
        ("deny-read-vs-reader", ("read", "none"), [(("read", "read"), True),
                                                    (("write", "write"), False)]),
    ]
    for name, (acc, deny), tries in cases:
        path = f"share-{tag}-v4{minor}-{name}".replace(" ", "-")
        must("create", lambda: a.close(a.open(path, "both", "none", create=True)))
        oa = must(f"A opens {path}", lambda: a.open(path, acc, deny))
        for (bacc, bdeny), clash in tries:
            held = []
            want = "NFS4ERR_SHARE_DENIED" if clash else "NFS4_OK"
            expect(f"v4.{minor} {tag}: A holds access {acc} deny {deny}; "
                   f"B opens access {bacc} deny {bdeny}",
                   want, lambda: held.append(b.open(path, bacc, bdeny)))
            for o in held:
                must("B closes", lambda: b.close(o))
        must("A closes", lambda: a.close(oa))
        if name == "deny-both":
            # The open that creates the file takes the deny mode too.
            path += "-created"
            oa = must(f"A creates {path}", lambda: a.open(path, "both", "both", create=True))
            expect(f"v4.{minor} {tag}: A created the file with deny both; B opens access read",
                   "NFS4ERR_SHARE_DENIED", lambda: b.open(path, "read", "none"))
            must("A closes", lambda: a.close(oa))
            held = []
            expect(f"v4.{minor} {tag}: after A's CLOSE, B opens access both deny both",
                   "NFS4_OK", lambda: held.append(b.open(path, "both", "both")))
            for o in held:
                must("B closes", lambda: b.close(o))


def io_cases(a, b, minor):
    """READ / WRITE without an open that grants them, against a deny (one gateway)."""
    path = f"share-io-v4{minor}"
    must("create", lambda: a.close(a.open(path, "both", "none", create=True)))
    oa = must("A opens access both deny write", lambda: a.open(path, "both", "write"))
    expect(f"v4.{minor}: A writes through its own open (deny write)", "NFS4_OK",
           lambda: a.write(oa, b"mine"))
    expect(f"v4.{minor}: B writes with the anonymous stateid against A's deny write",
           "NFS4ERR_LOCKED", lambda: b.write(oa, b"theirs", stateid=ANONYMOUS))
    expect(f"v4.{minor}: B reads with the anonymous stateid (no deny read)", "NFS4_OK",
           lambda: b.read(oa, stateid=ANONYMOUS))
    must("A closes", lambda: a.close(oa))
    expect(f"v4.{minor}: after A's CLOSE, B writes with the anonymous stateid", "NFS4_OK",
           lambda: b.write(oa, b"theirs", stateid=ANONYMOUS))

    oa = must("A opens access read deny read", lambda: a.open(path, "read", "read"))
    ob = must("B opens access write deny none", lambda: b.open(path, "write", "none"))
    expect(f"v4.{minor}: B reads through its write-only open against A's deny read",
           "NFS4ERR_LOCKED", lambda: b.read(ob))
    expect(f"v4.{minor}: B reads with the anonymous stateid against A's deny read",
           "NFS4ERR_LOCKED", lambda: b.read(ob, stateid=ANONYMOUS))
    expect(f"v4.{minor}: A reads through its own open (deny read)", "NFS4_OK",
           lambda: a.read(oa))
    must("B closes", lambda: b.close(ob))
    must("A closes", lambda: a.close(oa))


def replay_cases(a, b, minor):
    path = f"share-replay-v4{minor}"
    must("create", lambda: a.close(a.open(path, "both", "none", create=True)))
    oa = must("A opens access read deny both", lambda: a.open(path, "read", "both"))
    first = oa.stateid
    again = []
    expect(f"v4.{minor}: A's OPEN replayed", "NFS4_OK",
           lambda: again.append(a.replay_open()))
    if again:
        record(f"v4.{minor}: the replayed OPEN names the same open state", first.other.hex(),
               again[0].stateid.other.hex())
    expect(f"v4.{minor}: B still denied after A's replay", "NFS4ERR_SHARE_DENIED",
           lambda: b.open(path, "read", "none"))
    # The same open-owner opens again (an upgrade): no conflict with its own deny.
    up = []
    expect(f"v4.{minor}: A's open-owner opens again with access both deny both", "NFS4_OK",
           lambda: up.append(a.open(path, "both", "both", owner=oa.owner,
                                    seqid=(again[0] if again else oa).seqid)))
    final = up[0] if up else oa
    must("A closes", lambda: a.close(final))
    held = []
    expect(f"v4.{minor}: after A's CLOSE, B opens access read", "NFS4_OK",
           lambda: held.append(b.open(path, "read", "none")))
    for o in held:
        must("B closes", lambda: b.close(o))


def gateway_death(args):
    """g1 holds a deny mode and dies: g2's open must succeed once g1's session ends."""
    a = Client(args.gw1, 1, args.export, "dying")
    b = Client(args.gw2, 1, args.export, "survivor")
    path = "share-death"
    must("create", lambda: a.close(a.open(path, "both", "none", create=True)))
    must("A opens access both deny both", lambda: a.open(path, "both", "both"))
    expect("v4.1 across gateways: B opens while g1 holds deny both",
           "NFS4ERR_SHARE_DENIED", lambda: b.open(path, "read", "none"))
    subprocess.run(args.kill_gw1, shell=True, check=True)
    deadline = time.monotonic() + 20
    got = None
    while time.monotonic() < deadline:
        held = []
        got = outcome(lambda: held.append(b.open(path, "both", "none")))
        if got == "NFS4_OK":
            b.close(held[0])
            break
        time.sleep(0.5)
    record("v4.1 across gateways: B opens within 20 s after g1 was killed", "NFS4_OK", got)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--export", required=True)
    ap.add_argument("--gw1", type=int, required=True)
    ap.add_argument("--gw2", type=int)
    ap.add_argument("--kill-gw1")
    ap.add_argument("--stock", action="store_true",
                    help="the stock server: leave out the replay cases (its v4.0 replay "
                         "of an OPEN with deny both answers NFS4ERR_SHARE_DENIED)")
    args = ap.parse_args()
    for minor in (0, 1):
        a = Client(args.gw1, minor, args.export, f"a{minor}")
        b = Client(args.gw1, minor, args.export, f"b{minor}")
        c = Client(args.gw2, minor, args.export, f"c{minor}") if args.gw2 else None
        try:
            open_cases("one gateway", a, b, minor)
            if c:
                open_cases("two gateways", a, c, minor)
            io_cases(a, b, minor)
            if not args.stock:
                replay_cases(a, b, minor)
        except RuntimeError as e:
            print(f"FAIL - v4.{minor}: {e}")
            return 1
        for cl in (a, b, c):
            if cl:
                cl.shutdown()
    if args.kill_gw1 and args.gw2:
        try:
            gateway_death(args)
        except RuntimeError as e:
            print(f"FAIL - gateway death: {e}")
            return 1
    print(f"{checks - failures} of {checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
