"""Idempotent "make it so" steps over the `cairn` CLI, shared by first boot and the Ansible
roles (`cairn-appliance ensure ...`, ansible/roles/*/tasks). Each returns True when it
changed something. State is read with `cairn --json` (docs/cli.md, "JSON output"); every
change is one `cairn` command, so the CLI's checks and messages apply unchanged.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from typing import Optional, Sequence

from . import paths

CAIRN = os.environ.get("CAIRN_CLI", "/usr/local/bin/cairn")
MOUNT_CAIRN = os.environ.get("CAIRN_MOUNT", "/usr/local/sbin/mount.cairn")


class CairnError(Exception):
    pass


# Where the CLI looks for its credential when CAIRN_CREDENTIALS names none
# (backend/proto/src/tls/mod.rs DEFAULT_PATHS).
CLI_CREDENTIALS = ("/etc/cairn/credentials.pem", "/etc/cairn/admin.pem", "/var/lib/cairn/admin.pem")


def cli_credential() -> Optional[str]:
    """The credential the `cairn` CLI would use here, or None: a node that joined by token
    has its node certificate but no CLI credential (admin.pem stays on the first node)."""
    env = os.environ.get("CAIRN_CREDENTIALS")
    if env:
        return env
    for p in CLI_CREDENTIALS:
        if os.path.exists(paths.ROOT + p):
            return p
    return None


def cairn(args: Sequence[str], host: Optional[str] = None, check: bool = True,
          env: Optional[dict] = None) -> subprocess.CompletedProcess:
    cmd = [CAIRN]
    if host:
        cmd += ["--host", host]
    cmd += ["--mode=script", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")
        raise CairnError(f"cairn {' '.join(args)}: {msg}")
    return p


def cairn_json(args: Sequence[str], host: Optional[str] = None, env=None) -> dict:
    p = cairn(["--json", *args], host=host, env=env)
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise CairnError(f"cairn --json {' '.join(args)}: not JSON: {e}: {p.stdout[:200]!r}")


def peer(addr: str, host: Optional[str] = None) -> bool:
    """ADDR (HOST:PORT of a cairnd) is in the pool: probed with a fresh join token (made on
    the node we talk to, which must be a member; passed in the environment, not argv)."""
    peers = cairn_json(["pool", "list"], host=host).get("peers", [])
    if any(p.get("addr") == addr for p in peers):
        return False
    token = cairn(["peer", "token", "create", "--ttl", "10m"], host=host).stdout.strip()
    cairn(["peer", "probe", addr], host=host, env={"CAIRN_JOIN_TOKEN": token})
    return True


def volume(name: str, replica: int, bricks: Sequence[str], force: bool = False,
           host: Optional[str] = None) -> bool:
    """Volume NAME exists with these bricks and is started. An existing volume with other
    bricks is an error (growing a volume is an explicit add-brick, not a side effect)."""
    changed = False
    vols = {v["name"]: v for v in cairn_json(["volume", "info"], host=host).get("volumes", [])}
    v = vols.get(name)
    if v is None:
        args = ["volume", "create", name]
        if replica > 1:
            args += ["replica", str(replica)]
        args += list(bricks)
        if force:
            args.append("force")
        cairn(args, host=host)
        changed = True
        v = {"status": "Created"}
    else:
        have = [f"{b['node']}:{b['path']}" for s in v.get("sets", []) for b in s.get("bricks", [])]
        if list(bricks) and have != list(bricks):
            raise CairnError(f"volume {name} exists with bricks {' '.join(have)}, not "
                             f"{' '.join(bricks)}: change it with add-brick/replace-brick")
        if v.get("replica", replica) != replica:
            raise CairnError(f"volume {name} exists with replica {v.get('replica')}, not {replica}")
    if v.get("status") != "Started":
        cairn(["volume", "start", name], host=host)
        changed = True
    return changed


def volume_root_mode(name: str, mode: int, host: Optional[str] = None,
                     owner: Optional[tuple[int, int]] = None) -> bool:
    """The root directory of volume NAME has permission bits MODE (e.g. 0o1777: NFS
    clients, root squashed, and SMB users may create there) and, if given, OWNER (uid,
    gid). Read and set through a private FUSE mount of the volume, unmounted again."""
    addr = host or os.environ.get("CAIRN_HOST") or "127.0.0.1:7420"
    with tempfile.TemporaryDirectory(prefix=f"cairn-{name}-root.") as mnt:
        p = subprocess.run([MOUNT_CAIRN, f"{addr}:/{name}", mnt], capture_output=True,
                           text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise CairnError(f"volume {name}: mount.cairn {addr}:/{name} {mnt} to set the root's "
                             f"mode: {p.stderr.strip() or p.stdout.strip() or p.returncode}")
        try:
            st = os.stat(mnt)
            changed = False
            if owner is not None and (st.st_uid, st.st_gid) != owner:
                try:
                    os.chown(mnt, owner[0], owner[1])
                except OSError as e:
                    raise CairnError(f"volume {name}: chown {owner[0]}:{owner[1]} of the root: {e}")
                changed = True
            # (a chown clears no bits of a directory, but read the mode again anyway)
            if stat.S_IMODE(os.stat(mnt).st_mode) != mode:
                try:
                    os.chmod(mnt, mode)
                except OSError as e:
                    raise CairnError(f"volume {name}: chmod {oct(mode)} of the root: {e}")
                changed = True
            return changed
        finally:
            subprocess.run(["fusermount3", "-u", mnt], capture_output=True, timeout=60,
                           check=False)


def volume_option(name: str, key: str, value: str, host: Optional[str] = None) -> bool:
    vols = {v["name"]: v for v in cairn_json(["volume", "info", name], host=host).get("volumes", [])}
    if name not in vols:
        raise CairnError(f"volume {name} does not exist")
    if vols[name].get("options", {}).get(key) == value:
        return False
    cairn(["volume", "set", name, key, value], host=host)
    return True


def nfs_export(target: str, pseudo: str, clients: str, access: str = "rw",
               squash: str = "root_squash", host: Optional[str] = None) -> bool:
    """An NFS export of TARGET (VOLUME[/SUBDIR]) at PSEUDO exists with these settings."""
    p = cairn(["--json", "nfs", "export", "show", pseudo], host=host, check=False)
    if p.returncode == 0:
        ex = json.loads(p.stdout).get("export", {})
        vol, _, sub = target.partition("/")
        same = (ex.get("volume") == vol and ex.get("subdir", "/") == "/" + sub.strip("/") and
                ex.get("access", access).lower() == access and
                ex.get("squash", squash).lower().replace("-", "_") == squash and
                _norm_clients(ex.get("clients")) == _norm_clients(clients))
        if same:
            return False
        cairn(["nfs", "export", "remove", pseudo], host=host)
    cairn(["nfs", "export", "add", target, "--path", pseudo, "--clients", clients,
           "--access", access, "--squash", squash], host=host)
    return True


def _norm_clients(c) -> list[str]:
    if c is None:
        return []
    if isinstance(c, str):
        c = c.split(",")
    return sorted(str(x).strip() for x in c if str(x).strip())


def smb_share(name: str, target: str, read_only: bool = False, users: Optional[str] = None,
              host: Optional[str] = None) -> bool:
    """SMB share NAME of TARGET (VOLUME[/SUBDIR]) exists."""
    p = cairn(["--json", "smb", "share", "show", name], host=host, check=False)
    if p.returncode == 0:
        return False
    args = ["smb", "share", "add", name, "--volume", target]
    if read_only:
        args.append("--read-only")
    if users:
        args += ["--users", users]
    cairn(args, host=host)
    return True


def iscsi_lun(name: str, vol: str, size: str, thin: bool = False,
              host: Optional[str] = None) -> bool:
    p = cairn(["--json", "iscsi", "lun", "show", name], host=host, check=False)
    if p.returncode == 0:
        return False
    args = ["iscsi", "lun", "create", name, "--volume", vol, "--size", size]
    if thin:
        args.append("--thin")
    cairn(args, host=host)
    return True


def iscsi_target(iqn: str, luns: Sequence[str], portals: Sequence[str] = (),
                 open_: bool = False, host: Optional[str] = None) -> bool:
    """Target IQN exists and maps LUNS (names)."""
    changed = False
    p = cairn(["--json", "iscsi", "target", "show", iqn], host=host, check=False)
    if p.returncode != 0:
        args = ["iscsi", "target", "create", iqn]
        for portal in portals:
            args += ["--portal", portal]
        if open_:
            args.append("--open")
        cairn(args, host=host)
        changed = True
        mapped = set()
    else:
        mapped = {m.get("name") for m in json.loads(p.stdout).get("target", {}).get("luns", [])}
    for lun in luns:
        if lun not in mapped:
            cairn(["iscsi", "target", "lun", "add", iqn, lun], host=host)
            changed = True
    return changed


def gateway_credential(node: str, volumes: Sequence[str], pem: str = paths.GATEWAY_PEM,
                       env_file: str = paths.GATEWAY_ENV, ca_dir: str = paths.ETC) -> bool:
    """The gateway daemons' own certificate at PEM (0600): role gateway, CN NODE (the name
    HA fencing uses), limited to VOLUMES, issued with the cluster CA in CA_DIR; and ENV_FILE
    naming it (CAIRN_CREDENTIALS, which cairn-nfs, smbd and tcmu-runner read), so that they
    do not use admin.pem. Re-issued when the volumes differ (PEM's `.volumes` file). True
    if something changed. (ansible/roles/gateway does the same on a cluster.)"""
    want = ",".join(sorted(set(volumes)))
    if not want:
        raise CairnError(f"gateway certificate of {node}: no volumes to limit it to")
    marker = os.path.splitext(pem)[0] + ".volumes"
    changed = False
    if not os.path.exists(pem) or _read_text(marker) != want + "\n":
        cairn(["client", "certificate", "issue", node, "--role", "gateway", "--volumes", want,
               "--ca-dir", ca_dir, "--out", pem])
        os.chmod(pem, 0o600)
        _write_text(marker, want + "\n", 0o644)
        changed = True
    text = ("# Written by cairn-appliance: the gateway daemons' credential (role gateway)\n"
            f"CAIRN_CREDENTIALS={pem}\n")
    if _read_text(env_file) != text:
        _write_text(env_file, text, 0o644)
        changed = True
    return changed


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def _write_text(path: str, text: str, mode: int) -> None:
    tmp = f"{path}.new"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
