#!/usr/bin/env python3
"""Compare the bricks of each replica set, read directly on disk (not through Cairn).

    replicas.py --set "/b0 /b1 /b2" --set "/b3 /b4 /b5"

For every brick, walk `data/` and describe each entry by type, permission bits, owner,
Cairn id / linkto xattrs, size and SHA-256 of a regular file's data, or a symlink's
target. Exit 1 and print every difference when the bricks of a set disagree.
"""

import argparse
import hashlib
import os
import stat
import sys


def xattr(p, name):
    try:
        return os.getxattr(p, name, follow_symlinks=False).hex()
    except OSError:
        return None


def describe(root):
    out = {}
    data = os.path.join(root, "data")
    if not os.path.isdir(data):
        return None
    for dirpath, dirnames, filenames in os.walk(data):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, data)
            st = os.lstat(p)
            d = {
                "type": stat.S_IFMT(st.st_mode),
                "mode": oct(stat.S_IMODE(st.st_mode)),
                "owner": (st.st_uid, st.st_gid),
                "id": xattr(p, "trusted.cairn.id"),
                "linkto": xattr(p, "trusted.cairn.linkto"),
            }
            if stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                d["size"] = st.st_size
                d["sha256"] = h.hexdigest()[:16]
            elif stat.S_ISLNK(st.st_mode):
                d["target"] = os.readlink(p)
            out[rel] = d
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--set", action="append", required=True, help="space-separated brick dirs")
    a = p.parse_args()
    diffs = 0
    entries = 0
    for s in a.set:
        bricks = s.split()
        trees = {b: describe(b) for b in bricks}
        for b, t in trees.items():
            if t is None:
                print(f"DIFF brick {b}: no data/ directory")
                diffs += 1
        trees = {b: t for b, t in trees.items() if t is not None}
        names = sorted(set().union(*[set(t) for t in trees.values()])) if trees else []
        entries += len(names)
        for n in names:
            seen = {b: t.get(n) for b, t in trees.items()}
            vals = list(seen.values())
            if any(v != vals[0] for v in vals):
                diffs += 1
                print(f"DIFF {n}:")
                for b, v in seen.items():
                    print(f"    {b}: {v}")
    print(f"{len(a.set)} sets, {entries} entries compared, {diffs} differences")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
