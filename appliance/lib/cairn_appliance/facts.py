"""What first boot needs to know about the machine, and the checks of a Config against it.

`check_facts(cfg, probe)` takes a probe object (the real one is `Probe`; tests pass a fake)
and returns the problems, each a message naming the key it is about, like config.py's.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from . import etcdtls, paths
from .config import Config


class Probe:
    """Looks at this machine. Every method is small so a test can replace it."""

    def block_device(self, path: str) -> Optional[str]:
        """None if PATH is a block device, else why not."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "does not exist"
        except OSError as e:
            return f"cannot be examined: {e.strerror}"
        if not stat.S_ISBLK(st.st_mode):
            return "is not a block device"
        return None

    def holds_root(self, path: str) -> bool:
        """PATH is the disk (or a partition of the disk) the root file system is on."""
        root = _root_source()
        if not root:
            return False
        real = os.path.realpath(path)
        return real == root or _parent_disk(root) == real

    def in_use(self, path: str) -> Optional[str]:
        """Where PATH (or one of its partitions) is mounted, if it is, else None."""
        real = os.path.realpath(path)
        try:
            with open("/proc/self/mounts", encoding="utf-8") as f:
                for line in f:
                    dev, mnt = line.split()[:2]
                    if dev == real or (dev.startswith(real) and _parent_disk(dev) == real):
                        return mnt
        except OSError:
            pass
        return None

    def etcd_health(self, url: str, timeout: float = 3.0) -> Optional[str]:
        """None if the etcd at URL answers /health healthy, else why not. An https etcd
        requires a client certificate: with this node's (etcdtls.CLIENT) it must answer
        healthy; a node that has none yet (its enrollment brings it) checks that the port
        answers."""
        if url.startswith("https://"):
            ca, cert, key = (paths.ROOT + p for p in etcdtls.CLIENT)
            if not os.path.exists(cert):
                u = urllib.parse.urlsplit(url)
                try:
                    socket.create_connection((u.hostname, u.port or 2379), timeout=timeout).close()
                    return None
                except OSError as e:
                    return f"cannot be reached: {e.strerror or e}"
            try:
                ctx = ssl.create_default_context(cafile=ca)
                ctx.load_cert_chain(cert, key)
            except (OSError, ssl.SSLError) as e:
                return f"this node's etcd client certificate {cert}: {e}"
        else:
            ctx = None
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout,
                                        context=ctx) as r:
                body = r.read(4096).decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            return f"answered HTTP {e.code}"
        except urllib.error.URLError as e:
            return f"cannot be reached: {getattr(e.reason, 'strerror', None) or e.reason}"
        except OSError as e:
            return f"cannot be reached: {e.strerror or e}"
        try:
            if json.loads(body).get("health") in ("true", True):
                return None
        except ValueError:
            pass
        return f"is not healthy: {body.strip()[:200]}"


def _root_source() -> Optional[str]:
    try:
        out = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "/"], capture_output=True,
                             text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return os.path.realpath(out) if out.startswith("/dev/") else None


def _parent_disk(dev: str) -> Optional[str]:
    """/dev/vda1 -> /dev/vda, /dev/nvme0n1p2 -> /dev/nvme0n1 (through sysfs)."""
    name = os.path.basename(dev)
    link = f"/sys/class/block/{name}"
    if not os.path.exists(os.path.join(link, "partition")):
        return None
    return "/dev/" + os.path.basename(os.path.dirname(os.path.realpath(link)))


def check_facts(cfg: Config, probe) -> list[str]:
    """The problems of cfg on this machine: data disks that are missing, not block devices,
    hold the root file system or are mounted elsewhere; etcd endpoints of which none answers."""
    problems: list[str] = []
    for d in cfg.disks or []:
        why = probe.block_device(d)
        if why:
            problems.append(f"cairn.disks: data disk {d} {why} (attach the disk, or remove it "
                            "from cairn.disks to put the bricks on the root disk)")
        elif probe.holds_root(d):
            problems.append(f"cairn.disks: {d} holds the root file system; it cannot be a data disk")
        else:
            where = probe.in_use(d)
            if where and not where.startswith("/srv/cairn/"):
                problems.append(f"cairn.disks: {d} is mounted at {where}; unmount it or choose another disk")
    if cfg.etcd:
        errors = []
        for url in cfg.etcd:
            why = probe.etcd_health(url)
            if why is None:
                break
            errors.append(f"{url} {why}")
        else:
            problems.append("cairn.cluster.etcd: no etcd endpoint answers (" + "; ".join(errors) +
                            "); check the addresses, that etcd runs there, and that the "
                            "firewall lets this node reach port 2379")
    return problems
