"""`cairn-appliance status`: what this node is and how it is doing — role, first-boot
result and errors, services, volume health, addresses. `--json` for scripts."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Optional

from . import ensure, paths, render

UNITS = {
    "all-in-one": ["cairn-etcd", "cairnd", "cairn-nfs", "cairn-nfs-sync", "smbd",
                   "cairn-smb-sync", "tcmu-runner", "cairn-iscsi-sync", "nftables"],
    "brick": ["cairnd", "nftables"],
    "gateway": ["cairnd", "cairn-nfs", "cairn-nfs-sync", "smbd", "cairn-smb-sync",
                "tcmu-runner", "cairn-iscsi-sync", "nftables"],
    "managed": ["cairn-etcd", "cairnd", "cairn-nfs", "smbd", "tcmu-runner", "nftables"],
    "etcd": ["cairn-etcd", "nftables"],
}


def unit_state(unit: str) -> str:
    try:
        p = subprocess.run(["systemctl", "is-active", f"{unit}.service"], capture_output=True,
                           text=True, timeout=10, check=False)
        return p.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def unit_enabled(unit: str) -> bool:
    try:
        p = subprocess.run(["systemctl", "is-enabled", f"{unit}.service"], capture_output=True,
                           text=True, timeout=10, check=False)
        return p.stdout.strip() in ("enabled", "enabled-runtime", "static", "alias")
    except (OSError, subprocess.SubprocessError):
        return False


def mount_units() -> list[str]:
    """The cairn-mount@VOL units this node has (all-in-one: its volume's mount)."""
    try:
        p = subprocess.run(["systemctl", "list-units", "--all", "--plain", "--no-legend",
                            "cairn-mount@*.service"], capture_output=True, text=True,
                           timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split()[0].removesuffix(".service") for line in p.stdout.splitlines()
            if line.strip().startswith("cairn-mount@")]


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def volume_health(v: dict) -> dict:
    """One volume of `cairn --json volume status`: healthy, healing (bricks healing or
    entries pending heal), degraded (some bricks down), down (all), or its status when
    it is not started."""
    bricks = v.get("bricks", [])
    # cairn --json spells states "Up", "Healing", "Down"
    down = [f"{b.get('node')}:{b.get('path')}" for b in bricks
            if str(b.get("state", "")).lower() == "down" or b.get("online") is False]
    healing = [b for b in bricks if str(b.get("state", "")).lower() == "healing"]
    pending = sum(int(b.get("pending_heal") or 0) for b in bricks)
    health = "down" if bricks and len(down) == len(bricks) else \
        "degraded" if down else "healing" if healing or pending else "healthy"
    if v.get("status") != "Started":
        health = str(v.get("status", "unknown")).lower()
    return {"name": v.get("name"), "status": v.get("status"), "health": health,
            "bricks": len(bricks), "down": down, "pending_heal": pending}


def collect() -> dict:
    fb = read_json(paths.STATUS_FILE)
    env = {}
    try:
        with open(paths.APPLIANCE_ENV, encoding="utf-8") as f:
            env = render.parse_env(f.read())
    except OSError:
        pass
    role = env.get("CAIRN_ROLE") or (fb or {}).get("role") or "unconfigured"
    from .firstboot import primary_addresses  # local import: firstboot imports much
    doc: dict = {
        "node": env.get("CAIRN_NODE") or (fb or {}).get("node"),
        "role": role,
        "addresses": primary_addresses(env.get("CAIRN_ADVERTISE")),
        "etcd": [u for u in env.get("CAIRN_ETCD", "").split(",") if u],
        "firstboot": {
            "state": ("not run" if fb is None else
                      "done" if fb.get("ok") else
                      "failed" if fb.get("ok") is False else "running or interrupted"),
            "errors": (fb or {}).get("errors", []),
            "steps": (fb or {}).get("steps", []),
        },
        "services": {},
        "volumes": [],
        "problems": [],
    }
    units: list[str] = []
    for r in role.split(","):  # site.yml: a comma list (etcd,brick,gateway)
        for u in UNITS.get(r, ["cairnd"]):
            if u not in units:
                units.append(u)
    units += mount_units()
    for u in units:
        if (role == "managed" or "," in role) and not unit_enabled(u):
            continue
        doc["services"][u] = unit_state(u)
    if doc["firstboot"]["state"] == "failed":
        doc["problems"] += [f"first boot: {e}" for e in doc["firstboot"]["errors"]]
    for u, s in doc["services"].items():
        if s != "active":
            doc["problems"].append(f"service {u} is {s} (journalctl -u {u})")
    if doc["services"].get("cairnd") == "active" and ensure.cli_credential() is None:
        # a node that joined by token: the volumes are seen from a node with a credential
        doc["volumes_note"] = ("no CLI credential on this node (admin.pem is on the first node): "
                               "run 'cairn volume status' there")
    elif doc["services"].get("cairnd") == "active":
        try:
            vols = ensure.cairn_json(["volume", "status", "all"]).get("volumes", [])
            for v in vols:
                doc["volumes"].append(volume_health(v))
                h = doc["volumes"][-1]
                if h["health"] not in ("healthy", "healing"):
                    doc["problems"].append(f"volume {h['name']} is {h['health']}"
                                           + (f" (bricks down: {', '.join(h['down'])})" if h["down"] else ""))
        except ensure.CairnError as e:
            doc["problems"].append(f"volumes: {e}")
    return doc


def format_text(doc: dict) -> str:
    fb = doc["firstboot"]
    out = [f"Node:      {doc.get('node') or '?'}",
           f"Role:      {doc['role']}",
           f"Addresses: {', '.join(doc['addresses']) or 'none'}"]
    if doc["etcd"]:
        out.append(f"etcd:      {', '.join(doc['etcd'])}")
    out.append(f"First boot: {fb['state']}")
    for e in fb["errors"]:
        out.append(f"  error: {e}")
    out.append("Services:")
    for u, s in doc["services"].items():
        out.append(f"  {u:<18} {s}")
    if doc["volumes"]:
        out.append("Volumes:")
        for v in doc["volumes"]:
            extra = f", {v['pending_heal']} pending heal" if v["pending_heal"] else ""
            out.append(f"  {v['name']:<18} {v['status']}, {v['health']} ({v['bricks']} bricks{extra})")
    if doc.get("volumes_note"):
        out.append(f"Volumes:   {doc['volumes_note']}")
    out.append("Problems:" if doc["problems"] else "Problems: none")
    out += [f"  - {p}" for p in doc["problems"]]
    return "\n".join(out) + "\n"


def main(argv) -> int:
    if os.geteuid() != 0:
        print("cairn-appliance status: run as root (it reads root-only state)")
        return 2
    doc = collect()
    if "--json" in argv:
        print(json.dumps(doc, indent=2))
    else:
        print(format_text(doc), end="")
    return 0 if not doc["problems"] else 1
