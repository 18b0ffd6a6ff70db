"""The `cairn:` section of user-data: where it is found, what it may hold, and its checks.

Pure functions only (no I/O but reading the files named by `load`): `parse` turns YAML
text into a `Config`, raising `ConfigError` with every problem found, each naming the
key it is about. The checks that look at the machine (does the disk exist, does etcd
answer) live in `facts.py` and are applied by `check_facts` with injected probes, so both
halves are unit-tested (tests/appliance/test_firstboot*.py).

Schema (docs/appliance.md, "User-data"):

    cairn:
      role: all-in-one | brick | gateway | managed   # default all-in-one
      node_name: NAME          # default: the short host name
      address: IP              # address peers and clients use; default: the primary IPv4
      cluster:                 # required for brick and gateway; refused for all-in-one
        etcd: [http://10.0.0.1:2379, ...]   # or one comma-separated string
        token: SECRET          # join token (kept root-only; see docs/appliance.md)
        join: HOST[:PORT]      # a member holding the cluster CA; with ca_cert_hash, the
        ca_cert_hash: sha256:HEX   # node enrolls: its certificate comes with the token
      disks: [/dev/vdb, ...]   # data disks, formatted (ext4) if blank; default: autodetect
      volume:                  # all-in-one only; default {name: vol0, replica: 2, bricks: 2}
        name: vol0
        replica: 2             # 1..3
        bricks: 2              # a multiple of replica, 1..24
      nfs: true                # all-in-one and gateway: serve the volume over NFS
      smb: true                # ... over SMB (user `smb_user`, password generated)
      iscsi: true              # ... be ready for iSCSI LUNs (tcmu-runner, LIO)
      smb_user: cairn
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import urllib.parse
from typing import Any, Optional

import yaml

ROLES = ("all-in-one", "brick", "gateway", "managed")
# cloud-init keeps the user-data it was given here (raw) and the merged cloud-config
# parts here (cloudinit/helpers.py Paths lookups "userdata_raw" and "cloud_config").
_ROOT = os.environ.get("CAIRN_APPLIANCE_ROOT", "")  # tests: a scratch tree (paths.py)
USER_DATA_PATHS = (
    _ROOT + "/var/lib/cloud/instance/cloud-config.txt",
    _ROOT + "/var/lib/cloud/instance/user-data.txt",
)
VOLUME_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,62})$")
SMB_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
DISK = re.compile(r"^/dev/[A-Za-z0-9/_.:-]+$")
TOP_KEYS = {
    "role", "node_name", "address", "cluster", "disks", "volume",
    "nfs", "smb", "iscsi", "smb_user",
}


class ConfigError(Exception):
    """Every problem found in a `cairn:` section, one message per problem."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass
class Volume:
    name: str = "vol0"
    replica: int = 2
    bricks: int = 2


@dataclasses.dataclass
class Config:
    role: str = "all-in-one"
    node_name: Optional[str] = None
    address: Optional[str] = None
    etcd: list[str] = dataclasses.field(default_factory=list)
    token: Optional[str] = None
    join: Optional[str] = None  # HOST:PORT of the member to enroll through
    ca_cert_hash: Optional[str] = None  # sha256:HEX, the pinned cluster CA
    disks: Optional[list[str]] = None  # None: autodetect; []: none (root disk folder)
    volume: Optional[Volume] = None
    nfs: bool = True
    smb: bool = True
    iscsi: bool = True
    smb_user: str = "cairn"
    source: str = "default"  # where the section came from (a path, or "default")

    @property
    def runs_etcd(self) -> bool:
        """This node runs its own single-member etcd (all-in-one)."""
        return self.role == "all-in-one"

    @property
    def has_bricks(self) -> bool:
        return self.role in ("all-in-one", "brick")

    @property
    def is_gateway(self) -> bool:
        return self.role in ("all-in-one", "gateway")

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["token"]:
            d["token"] = "********"
        return d


CA_HASH = re.compile(r"sha256:[0-9a-fA-F]{64}")
HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")


def join_address(value: Any) -> str:
    """`HOST[:PORT]` (an IP, [IPv6]:PORT, or a DNS name) as `HOST:PORT`, the default port
    7420 added; ValueError saying what is wrong."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be HOST or HOST:PORT of a member (a string)")
    v = value.strip()
    host, port = v, "7420"
    if v.startswith("["):
        end = v.find("]")
        if end < 0:
            raise ValueError(f"{v!r}: unclosed [ of an IPv6 address")
        host, rest = v[1:end], v[end + 1:]
        if rest:
            if not rest.startswith(":"):
                raise ValueError(f"{v!r}: expected :PORT after ]")
            port = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{v!r}: {host!r} is not an IPv6 address") from None
        host = f"[{host}]"
    elif v.count(":") == 1:
        host, port = v.split(":")
    elif v.count(":") > 1:
        raise ValueError(f"{v!r}: write an IPv6 address as [ADDR]:PORT")
    if not host.startswith("[") and not HOST.fullmatch(host):
        raise ValueError(f"{v!r}: {host!r} is not a host name or IP address")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{v!r}: port {port!r} is not 1-65535")
    return f"{host}:{int(port)}"


def _enrollment(problems: list[str], cluster: dict, cfg: "Config") -> None:
    """cluster.join and cluster.ca_cert_hash: both or neither, and with a token."""
    join, pin = cluster.get("join"), cluster.get("ca_cert_hash")
    if join is not None:
        try:
            cfg.join = join_address(join)
        except ValueError as e:
            problems.append(f"cairn.cluster.join: {e}")
    if pin is not None:
        if isinstance(pin, str) and CA_HASH.fullmatch(pin.strip()):
            cfg.ca_cert_hash = pin.strip().lower()
        else:
            problems.append(f"cairn.cluster.ca_cert_hash: {pin!r} is not sha256: and 64 hex "
                            "digits (as 'cairn peer token create' prints it)")
    if (join is None) != (pin is None):
        have, lack = ("join", "ca_cert_hash") if pin is None else ("ca_cert_hash", "join")
        problems.append(f"cairn.cluster.{lack}: cluster.{have} needs it: the node enrolls "
                        "with the token through a member (join) whose CA it checks by its "
                        "hash (ca_cert_hash); 'cairn peer token create' prints both")
    if (join is not None or pin is not None) and cluster.get("token") is None:
        problems.append("cairn.cluster.token: enrolling (cluster.join) needs a join token "
                        "('cairn peer token create' on a member)")


def extract_section(text: str, source: str = "user-data") -> Optional[Any]:
    """The value of the top-level `cairn:` key of a YAML user-data document, or None when
    the document is not YAML (a shell script, MIME multipart), or holds no such key."""
    if text is None or not text.strip():
        return None
    first = text.lstrip().splitlines()[0]
    if first.startswith("#!") or first.lower().startswith("content-type:") or \
            first.lower().startswith("mime-version:"):
        return None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError([f"{source}: not valid YAML{where}: {getattr(e, 'problem', e)}"])
    if not isinstance(doc, dict):
        return None
    return doc.get("cairn")


def _bool(problems: list[str], d: dict, key: str, default: bool) -> bool:
    v = d.get(key, default)
    if isinstance(v, bool):
        return v
    problems.append(f"cairn.{key}: must be true or false (got {v!r})")
    return default


def _int(problems: list[str], d: dict, key: str, default: int, lo: int, hi: int) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        problems.append(f"cairn.volume.{key}: must be a whole number from {lo} to {hi} (got {v!r})")
        return default
    if not lo <= v <= hi:
        problems.append(f"cairn.volume.{key}: must be from {lo} to {hi} (got {v})")
    return v


def _etcd_urls(problems: list[str], v: Any) -> list[str]:
    if isinstance(v, str):
        v = [u.strip() for u in v.split(",") if u.strip()]
    if not isinstance(v, list) or not v:
        problems.append("cairn.cluster.etcd: must be a list of etcd client URLs "
                        "(http://HOST:2379) or one comma-separated string")
        return []
    urls = []
    for u in v:
        if not isinstance(u, str):
            problems.append(f"cairn.cluster.etcd: {u!r} is not a URL")
            continue
        p = urllib.parse.urlsplit(u)
        try:
            port_ok = p.port is not None
        except ValueError:
            port_ok = False
        if p.scheme not in ("http", "https") or not p.hostname or not port_ok or \
                p.path not in ("", "/"):
            problems.append(f"cairn.cluster.etcd: {u!r} is not an etcd client URL "
                            "(http://HOST:PORT, e.g. http://10.0.0.1:2379)")
            continue
        urls.append(u.rstrip("/"))
    return urls


def parse_section(section: Any, source: str = "user-data") -> Config:
    """Check a `cairn:` section (already loaded from YAML) and return its Config.
    None (no section) gives the all-in-one default."""
    cfg = Config(source=source)
    if section is None:
        cfg.volume = Volume()
        cfg.source = "default"
        return cfg
    if not isinstance(section, dict):
        raise ConfigError([f"cairn: must be a mapping of settings (got {type(section).__name__})"])
    problems: list[str] = []
    unknown = sorted(str(k) for k in section if k not in TOP_KEYS)
    if unknown:
        problems.append(f"cairn: unknown key(s) {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(TOP_KEYS))})")

    role = section.get("role", "all-in-one")
    if role not in ROLES:
        problems.append(f"cairn.role: unknown role {role!r} (expected one of {', '.join(ROLES)})")
    else:
        cfg.role = role

    name = section.get("node_name")
    if name is not None:
        if not isinstance(name, str) or not NODE_NAME.match(name):
            problems.append(f"cairn.node_name: {name!r} is not a host name "
                            "(letters, digits and '-', up to 63, not starting with '-')")
        else:
            cfg.node_name = name

    addr = section.get("address")
    if addr is not None:
        try:
            cfg.address = str(ipaddress.ip_address(str(addr)))
        except ValueError:
            problems.append(f"cairn.address: {addr!r} is not an IP address")

    cluster = section.get("cluster")
    if cluster is not None:
        if not isinstance(cluster, dict):
            problems.append("cairn.cluster: must be a mapping with etcd (and token)")
        else:
            known = ("etcd", "token", "join", "ca_cert_hash")
            extra = sorted(str(k) for k in cluster if k not in known)
            if extra:
                problems.append(f"cairn.cluster: unknown key(s) {', '.join(extra)} (known: {', '.join(known)})")
            _enrollment(problems, cluster, cfg)
            if "etcd" in cluster:
                cfg.etcd = _etcd_urls(problems, cluster["etcd"])
            tok = cluster.get("token")
            if tok is not None:
                if not isinstance(tok, str) or not tok.strip():
                    problems.append("cairn.cluster.token: must be a non-empty string")
                else:
                    cfg.token = tok.strip()
    if cfg.role in ("brick", "gateway") and not cfg.etcd and \
            not any(p.startswith("cairn.cluster.etcd") for p in problems):
        problems.append(f"cairn.cluster.etcd: role {cfg.role} joins a cluster: give the etcd "
                        "endpoints to join (cluster: {etcd: [http://HOST:2379]})")
    if cfg.role == "all-in-one" and cluster is not None:
        problems.append("cairn.cluster: an all-in-one node runs its own etcd and joins no "
                        "cluster; use role brick or gateway to join one")

    disks = section.get("disks")
    if disks is not None:
        if isinstance(disks, str):
            disks = [disks]
        if not isinstance(disks, list):
            problems.append("cairn.disks: must be a list of block devices (/dev/vdb)")
        else:
            seen = []
            for d in disks:
                if not isinstance(d, str) or not DISK.match(d):
                    problems.append(f"cairn.disks: {d!r} is not a device path (/dev/NAME)")
                elif d in seen:
                    problems.append(f"cairn.disks: {d} is listed twice")
                else:
                    seen.append(d)
            cfg.disks = seen
    if cfg.disks and cfg.role == "gateway":
        problems.append("cairn.disks: a gateway holds no bricks; data disks go to brick or all-in-one nodes")

    vol = section.get("volume")
    if vol is not None and cfg.role != "all-in-one":
        problems.append("cairn.volume: only an all-in-one node creates its volume at first "
                        "boot; in a cluster create volumes with ansible/site.yml or "
                        "'cairn volume create'")
    elif vol is not None and not isinstance(vol, dict):
        problems.append("cairn.volume: must be a mapping with name, replica and bricks "
                        f"(got {vol!r})")
    elif cfg.role == "all-in-one":
        vol = vol or {}
        extra = sorted(str(k) for k in vol if k not in ("name", "replica", "bricks"))
        if extra:
            problems.append(f"cairn.volume: unknown key(s) {', '.join(extra)} (known: name, replica, bricks)")
        v = Volume()
        vname = vol.get("name", v.name)
        if not isinstance(vname, str) or not VOLUME_NAME.match(vname) or vname == "all":
            problems.append(f"cairn.volume.name: {vname!r} is not a volume name "
                            "(1-64 of A-Z a-z 0-9 _ -, not 'all')")
        else:
            v.name = vname
        v.replica = _int(problems, vol, "replica", v.replica, 1, 3)
        v.bricks = _int(problems, vol, "bricks", v.bricks, 1, 24)
        if v.replica >= 1 and v.bricks >= 1 and v.bricks % v.replica:
            problems.append(f"cairn.volume.bricks: {v.bricks} bricks do not make whole replica "
                            f"sets of {v.replica}")
        cfg.volume = v

    for key in ("nfs", "smb", "iscsi"):
        setattr(cfg, key, _bool(problems, section, key, True))
    user = section.get("smb_user", cfg.smb_user)
    if not isinstance(user, str) or not SMB_USER.match(user) or user == "root":
        problems.append(f"cairn.smb_user: {user!r} is not a user name for the SMB login "
                        "(lower-case letters, digits, _ and -; not root)")
    else:
        cfg.smb_user = user

    if problems:
        raise ConfigError(problems)
    return cfg


def parse(text: Optional[str], source: str = "user-data") -> Config:
    """parse_section of the `cairn:` key of the YAML document `text`."""
    return parse_section(extract_section(text or "", source), source)


def load(paths=USER_DATA_PATHS) -> Config:
    """The Config of this instance: the first of `paths` that holds a `cairn:` section,
    else the all-in-one default (no user-data, or user-data without `cairn:`)."""
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ConfigError([f"{path}: cannot read user-data: {e.strerror}"])
        section = extract_section(text, path)
        if section is not None:
            return parse_section(section, path)
    return parse_section(None)
