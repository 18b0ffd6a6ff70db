#!/usr/bin/env python3
"""Share modes between NFSv4 (Ganesha + FSAL_CAIRN) and SMB (smbd + vfs_cairn with
'kernel share modes = yes') over one volume (run by nfs-sharemodes.sh).

    nfs-sharemodes.py --nfs-port P --export /vol0 --smbclient "CMD..." --smbstatus "CMD..."

NFS opens come from tests/nfs/nfs4raw.py (explicit share_access / share_deny); SMB opens
from smbclient (`put`: write access, `get`: read access, `open`: read+write access, all
sharing read and write). Checks that an NFS deny mode refuses a conflicting SMB open
(NT_STATUS_SHARING_VIOLATION) and that an open SMB file refuses an NFS OPEN denying
what SMB does (NFS4ERR_SHARE_DENIED), and that CLOSE on either side lifts it.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nfs"))
from nfs4raw import Client, Nfs4Error  # noqa: E402

failures = 0
checks = 0


def record(what, want, got):
    global failures, checks
    checks += 1
    if got == want:
        print(f"ok - {what}: {got}")
    else:
        failures += 1
        print(f"FAIL - {what}: got {got}, want {want}")


def nfs(fn):
    try:
        fn()
        return "NFS4_OK"
    except Nfs4Error as e:
        return e.name


def smb(args, cmd):
    """Run smbclient commands; the NT status of a failure, else NT_STATUS_OK."""
    p = subprocess.run(shlex.split(args.smbclient) + ["-c", cmd], capture_output=True,
                       text=True, timeout=60)
    out = p.stdout + p.stderr
    for word in out.split():
        if word.startswith("NT_STATUS_") and word != "NT_STATUS_OK":
            return word
    return "NT_STATUS_OK" if p.returncode == 0 else f"exit {p.returncode}: {out.strip()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nfs-port", type=int, required=True)
    ap.add_argument("--export", required=True)
    ap.add_argument("--smbclient", required=True)
    ap.add_argument("--smbstatus", required=True)
    args = ap.parse_args()
    local = tempfile.NamedTemporaryFile(delete=False)
    local.write(b"from smb\n")
    local.close()
    c = Client(args.nfs_port, 1, args.export, "nfs-vs-smb")

    # NFS deny modes against SMB opens
    c.close(c.open("xp-a", "both", "none", create=True))
    o = c.open("xp-a", "read", "write")
    record("NFS holds deny write; SMB put (write access)", "NT_STATUS_SHARING_VIOLATION",
           smb(args, f"put {local.name} xp-a"))
    record("NFS holds deny write; SMB get (read access)", "NT_STATUS_OK",
           smb(args, "get xp-a /dev/null"))
    c.close(o)
    record("after NFS CLOSE, SMB put", "NT_STATUS_OK", smb(args, f"put {local.name} xp-a"))
    o = c.open("xp-a", "read", "read")
    record("NFS holds deny read; SMB get (read access)", "NT_STATUS_SHARING_VIOLATION",
           smb(args, "get xp-a /dev/null"))
    c.close(o)
    o = c.open("xp-a", "write", "none")
    record("NFS holds write access, no deny; SMB get", "NT_STATUS_OK",
           smb(args, "get xp-a /dev/null"))
    c.close(o)

    # An SMB open (read+write access, sharing read and write) against NFS deny modes
    c.close(c.open("xp-b", "both", "none", create=True))
    held = subprocess.Popen(shlex.split(args.smbclient), stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    held.stdin.write("open xp-b\n")
    held.stdin.flush()
    deadline = time.monotonic() + 20
    listed = False
    while time.monotonic() < deadline and not listed:
        st = subprocess.run(shlex.split(args.smbstatus), capture_output=True, text=True)
        listed = "xp-b" in st.stdout
        time.sleep(0.2)
    record("smbd lists the SMB client's open of xp-b", True, listed)
    if listed:
        record("SMB holds xp-b open for read+write; NFS OPEN deny write",
               "NFS4ERR_SHARE_DENIED", nfs(lambda: c.open("xp-b", "read", "write")))
        record("SMB holds xp-b open for read+write; NFS OPEN deny read",
               "NFS4ERR_SHARE_DENIED", nfs(lambda: c.open("xp-b", "read", "read")))
        got = []
        record("SMB holds xp-b open; NFS OPEN access both deny none", "NFS4_OK",
               nfs(lambda: got.append(c.open("xp-b", "both", "none"))))
        for x in got:
            c.close(x)
    held.stdin.write("quit\n")
    held.stdin.close()
    try:
        held.wait(timeout=30)
    except subprocess.TimeoutExpired:
        held.kill()
        record("the SMB client holding xp-b quit", "exited", "still running after 30 s")
    got = []
    record("after the SMB client closed, NFS OPEN deny both", "NFS4_OK",
           nfs(lambda: got.append(c.open("xp-b", "both", "both"))))
    for x in got:
        c.close(x)
    os.unlink(local.name)
    print(f"{checks - failures} of {checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
