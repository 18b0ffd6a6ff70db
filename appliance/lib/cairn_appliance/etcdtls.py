"""etcd over TLS on the appliance (docs/security.md, "etcd"): a dedicated etcd CA, etcd's
server certificate and the client certificates cairnd, the CLI helpers and the CTDB lock
helper present. etcd requires a client certificate of this CA (--client-cert-auth) on its
client and peer ports and listens on https only.

Three directories, each with what one kind of process may read:

  ETCD_CA_DIR      the etcd CA (ca-key.pem) and what scripts/etcd-tls.sh makes with it;
                   on the node holding the cluster CA only (the first node), root, 0700
  ETCD_SERVER_DIR  ca.pem, server.pem, server-key.pem: an etcd member's; 0750 root:etcd,
                   the key 0640 root:etcd (etcd runs as user etcd)
  ETCD_CLIENT_DIR  ca.pem, client.pem, client-key.pem: every node's etcd client identity;
                   root, 0700, the key 0600. `cairnd --join` writes it from the enrollment
                   answer on a node that joins by token.
  ETCD_RECLOCK_DIR the same three files for the CTDB lock helper of a gateway: the
                   certificate of etcd user cairn-reclock (the lock key only, not the
                   cluster's keys); root, 0700, the key 0600. ctdb-etcd-reclock prefers it.

The certificates are made by scripts/etcd-tls.sh (openssl), as `make up` does.
"""

from __future__ import annotations

import grp
import os
import subprocess
from typing import Optional, Sequence

from . import paths

CA_DIR = paths.ETCD_CA_DIR
SERVER_DIR = paths.ETCD_SERVER_DIR
CLIENT_DIR = paths.ETCD_CLIENT_DIR
RECLOCK_DIR = paths.ETCD_RECLOCK_DIR
# (CA, certificate, key) cairnd and the helpers present to etcd (appliance.env CAIRN_ETCD_*)
# (the paths on the running system: appliance.env names them)
CLIENT = ("/etc/cairn/etcd-client/ca.pem", "/etc/cairn/etcd-client/client.pem",
          "/etc/cairn/etcd-client/client-key.pem")
# SERVER_DIR on the running system (etcd.env names it)
SERVER_PATH = "/etc/cairn/etcd-server"
# (certificate, key) a joining node's cairnd stores the etcd member certificate of its
# enrollment at (appliance.env CAIRN_ETCD_MEMBER_*; root 0700, the key 0600)
MEMBER_DIR = paths.ETCD_MEMBER_DIR
MEMBER = ("/etc/cairn/etcd-member/server.pem", "/etc/cairn/etcd-member/server-key.pem")


class EtcdTlsError(Exception):
    pass


def script() -> str:
    """scripts/etcd-tls.sh: in the repo next to appliance/, installed under LIBEXEC."""
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "..", "..", "..", "scripts", "etcd-tls.sh"),
              f"{paths.LIBEXEC}/scripts/etcd-tls.sh"):
        if os.path.isfile(p):
            return os.path.normpath(p)
    raise EtcdTlsError(f"etcd TLS: {paths.LIBEXEC}/scripts/etcd-tls.sh is missing (reinstall Cairn)")


def _sh(func: str, *args: str) -> None:
    p = subprocess.run(["bash", "-c", f'. "$0" && {func} "$@"', script(), *args],
                       capture_output=True, text=True, check=False, timeout=120)
    if p.returncode != 0:
        raise EtcdTlsError(f"etcd TLS: {func} {' '.join(args)} failed (exit {p.returncode}): "
                           f"{p.stderr.strip()[-400:]}")


def make_ca(ips: Sequence[str] = ()) -> bool:
    """The etcd CA in CA_DIR with a server certificate for 127.0.0.1, localhost and IPS,
    and the client certificates root and cairn; kept when there. True if made now."""
    if all(os.path.exists(f"{CA_DIR}/{f}") for f in ("ca.pem", "ca-key.pem", "server.pem")):
        return False
    _sh("etcd_tls_make", CA_DIR, *ips)
    return True


def issue_client(name: str) -> bool:
    """A client certificate NAME.pem (CN NAME) of the etcd CA in CA_DIR; True if made now."""
    if os.path.exists(f"{CA_DIR}/{name}.pem") and os.path.exists(f"{CA_DIR}/{name}-key.pem"):
        return False
    _sh("etcd_tls_client", CA_DIR, name)
    return True


def _copy(src: str, dst: str, mode: int, gid: int = -1) -> bool:
    with open(src, "rb") as f:
        data = f.read()
    try:
        with open(dst, "rb") as f:
            same = f.read() == data
    except OSError:
        same = False
    if not same:
        tmp = dst + ".new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dst)
    st = os.stat(dst)
    if st.st_mode & 0o7777 != mode or (gid >= 0 and (st.st_uid, st.st_gid) != (0, gid)):
        if gid >= 0:
            os.chown(dst, 0, gid)
        os.chmod(dst, mode)
        same = False
    return not same


def _dir(d: str, mode: int, gid: int = -1) -> bool:
    changed = not os.path.isdir(d)
    os.makedirs(d, mode=mode, exist_ok=True)
    st = os.stat(d)
    if st.st_mode & 0o7777 != mode or (gid >= 0 and st.st_gid != gid):
        if gid >= 0:
            os.chown(d, 0, gid)
        os.chmod(d, mode)
        changed = True
    return changed


def _etcd_gid(group: Optional[str]) -> int:
    try:
        return grp.getgrnam(group or "etcd").gr_gid
    except KeyError:
        raise EtcdTlsError(f"etcd TLS: no group {group or 'etcd'} (is etcd-server installed?)")


def install_server(group: Optional[str] = None) -> bool:
    """etcd's own files from CA_DIR into SERVER_DIR, readable by etcd's group only."""
    gid = _etcd_gid(group)
    changed = _dir(SERVER_DIR, 0o750, gid)
    changed |= _copy(f"{CA_DIR}/ca.pem", f"{SERVER_DIR}/ca.pem", 0o644, gid)
    changed |= _copy(f"{CA_DIR}/server.pem", f"{SERVER_DIR}/server.pem", 0o644, gid)
    changed |= _copy(f"{CA_DIR}/server-key.pem", f"{SERVER_DIR}/server-key.pem", 0o640, gid)
    return changed


def install_member(group: Optional[str] = None) -> bool:
    """A joined node's etcd server and peer certificate (MEMBER_DIR, from its enrollment)
    and the etcd CA (CLIENT_DIR's) into SERVER_DIR for etcd, as install_server does on the
    CA node: the node can then run an etcd member (`etcdctl member add` on the cluster,
    etcd.env on the node). False when the enrollment brought none."""
    cert, key = f"{MEMBER_DIR}/server.pem", f"{MEMBER_DIR}/server-key.pem"
    if not (os.path.exists(cert) and os.path.exists(key)):
        return False
    gid = _etcd_gid(group)
    _dir(SERVER_DIR, 0o750, gid)
    _copy(f"{CLIENT_DIR}/ca.pem", f"{SERVER_DIR}/ca.pem", 0o644, gid)
    _copy(cert, f"{SERVER_DIR}/server.pem", 0o644, gid)
    _copy(key, f"{SERVER_DIR}/server-key.pem", 0o640, gid)
    return True


def install_client(name: str, dest: Optional[str] = None) -> bool:
    """The client certificate NAME of CA_DIR as an etcd identity in DEST (default
    CLIENT_DIR, this node's): ca.pem, client.pem, client-key.pem; root 0700, key 0600."""
    dest = dest or CLIENT_DIR
    for f in (f"{name}.pem", f"{name}-key.pem"):
        if not os.path.exists(f"{CA_DIR}/{f}"):
            raise EtcdTlsError(f"etcd TLS: no {CA_DIR}/{f} to install in {dest} "
                               f"(`cairn-appliance etcd-tls client {name}` on the etcd CA's node)")
    changed = _dir(dest, 0o700)
    changed |= _copy(f"{CA_DIR}/ca.pem", f"{dest}/ca.pem", 0o644)
    changed |= _copy(f"{CA_DIR}/{name}.pem", f"{dest}/client.pem", 0o644)
    changed |= _copy(f"{CA_DIR}/{name}-key.pem", f"{dest}/client-key.pem", 0o600)
    return changed


def install_reclock() -> bool:
    """The CTDB lock helper's etcd identity (user cairn-reclock, the lock key only) into
    RECLOCK_DIR, on a gateway whose CA_DIR holds it (the all-in-one node; Ansible copies
    it from the CA node). ctdb-etcd-reclock uses it instead of the node's identity."""
    return install_client(RECLOCK_USER, RECLOCK_DIR)


# The etcd key of the CTDB cluster lock and the etcd user that may use only it
# (appliance/ha/ctdb-etcd-reclock; docs/ha.md)
RECLOCK_KEY = "/cairn/ha/ctdb/reclock"
RECLOCK_USER = "cairn-reclock"


def enable_auth(endpoint: str, users: Sequence[str] = (), prefix: str = "/cairn") -> bool:
    """etcd auth on at ENDPOINT (scripts/etcd-tls.sh etcd_tls_auth, as etcd's root with
    CA_DIR's root certificate): users root and cairn, role cairn (read-write under PREFIX
    only); each of USERS (a node's cairn-NODE) an etcd user with a role of its own
    (etcd_tls_own_node_user: read-write under PREFIX, but no other node's liveness key
    PREFIX/live/OTHER); user cairn-reclock limited to the CTDB lock key, with its client
    certificate issued in CA_DIR. No passwords: a client certificate's CN is its etcd
    user. Idempotent; True."""
    _sh("etcd_tls_auth", endpoint, CA_DIR, prefix)
    for u in users:
        if u.startswith("cairn-") and len(u) > len("cairn-"):
            _sh("etcd_tls_own_node_user", endpoint, CA_DIR, u[len("cairn-"):], prefix)
        else:
            _sh("etcd_tls_node_user", endpoint, CA_DIR, u)
    issue_client(RECLOCK_USER)
    _sh("etcd_tls_lock_user", endpoint, CA_DIR, RECLOCK_USER, RECLOCK_KEY)
    return True


def uses_tls(urls: Sequence[str]) -> bool:
    return any(u.startswith("https://") for u in urls)
