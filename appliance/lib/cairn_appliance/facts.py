"""What first boot needs to know about the machine, and the checks of a Config against it.

`check_facts(cfg, probe)` takes a probe object (the real one is `Probe`; tests pass a fake)
and returns the problems, each a message naming the key it is about, like config.py's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl
import stat
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from . import etcdtls, paths
from .config import Config


# How long first boot waits for cairn.address to be on an interface: a static address on a
# link that comes up late, or a DHCP lease that is slow under load.
ADDRESS_WAIT = 180


class Probe:
    """Looks at this machine. Every method is small so a test can replace it."""

    def addresses(self) -> list[str]:
        """The addresses of this machine's interfaces (`ip -j addr`), loopback included."""
        try:
            out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True,
                                 timeout=10, check=False).stdout
            return [a["local"] for link in json.loads(out or "[]")
                    for a in link.get("addr_info", []) if a.get("local")]
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            return []

    def address_here(self, address: str, timeout: float = ADDRESS_WAIT) -> Optional[str]:
        """None once ADDRESS is on one of this machine's interfaces (waiting up to TIMEOUT
        seconds for it to appear), else why not."""
        want = ipaddress.ip_address(address)
        deadline = time.monotonic() + timeout
        while True:
            have = self.addresses()
            if any(_same_ip(want, a) for a in have):
                return None
            if time.monotonic() >= deadline:
                shown = ", ".join(a for a in have if not ipaddress.ip_address(a).is_loopback)
                return (f"is not an address of this node after {int(timeout)}s (it has: "
                        f"{shown or 'no address but loopback'})")
            time.sleep(2)

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


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _same_ip(want, text: str) -> bool:
    try:
        return ipaddress.ip_address(text) == want
    except ValueError:
        return False


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
    """The problems of cfg on this machine: cairn.address not on any interface; data disks
    that are missing, not block devices, hold the root file system or are mounted elsewhere;
    etcd endpoints of which none answers."""
    problems: list[str] = []
    # First: the etcd check below may need this address to reach the cluster. An advertised
    # address the node does not have sends every connection to it (its own mounts' and
    # peers') off the node, through the default route, to whatever answers there.
    if cfg.address and _is_ip(cfg.address):
        why = probe.address_here(cfg.address)
        if why:
            problems.append(f"cairn.address: {cfg.address} {why}; configure it on an interface "
                            "(user-data bootcmd or network-config) or remove cairn.address to "
                            "advertise the default route's address")
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
