#!/usr/bin/env python3
"""`cairn-appliance firstboot` on bad input, run as the unit runs it but against a scratch
root (CAIRN_APPLIANCE_ROOT: user-data, state, /etc/motd and the console are files under
it): an unknown role, a malformed volume spec, a missing data disk and an unreachable etcd
each stop first boot before it changes anything, with the message on the console, in
/etc/motd, in the journal (stdout) and in `cairn-appliance status`; no done-marker is
written, so a reboot retries. Also volume_health of `cairn-appliance status`.
Run: python3 -m unittest tests/appliance/test_firstboot_run.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
EXE = os.path.join(REPO, "appliance", "bin", "cairn-appliance")
sys.path.insert(0, os.path.join(REPO, "appliance", "lib"))

from cairn_appliance import status  # noqa: E402

CASES = {
    "unknown role": ("#cloud-config\ncairn:\n  role: storage\n",
                     "cairn.role: unknown role 'storage'"),
    "malformed volume": ("#cloud-config\ncairn:\n  volume: {name: vol0, replica: 2, bricks: 3}\n",
                         "cairn.volume.bricks: 3 bricks do not make whole replica sets of 2"),
    "missing disk": ("#cloud-config\ncairn:\n  disks: [/dev/cairn-test-no-such-disk]\n",
                     "cairn.disks: data disk /dev/cairn-test-no-such-disk does not exist"),
    "unreachable etcd": ("#cloud-config\ncairn:\n  role: brick\n  cluster:\n    etcd: [http://127.0.0.1:1]\n",
                         "cairn.cluster.etcd: no etcd endpoint answers (http://127.0.0.1:1 cannot be reached"),
}


class FirstbootFailureTest(unittest.TestCase):
    def setUp(self):
        root = os.path.join(REPO, "build", "test-tmp")
        os.makedirs(root, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="appliance-firstboot.", dir=root)
        os.makedirs(os.path.join(self.root, "var/lib/cloud/instance"))
        os.makedirs(os.path.join(self.root, "dev"))
        self.env = {**os.environ, "CAIRN_APPLIANCE_ROOT": self.root}

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def read(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8") as f:
            return f.read()

    def run_case(self, user_data, message):
        with open(os.path.join(self.root, "var/lib/cloud/instance/user-data.txt"), "w") as f:
            f.write(user_data)
        p = subprocess.run([EXE, "firstboot"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(message, p.stdout)  # the journal
        self.assertIn("Cairn first boot FAILED", self.read("dev/console"))
        self.assertIn(message, self.read("dev/console"))
        self.assertIn(message, self.read("etc/motd"))
        self.assertFalse(os.path.exists(os.path.join(self.root, "var/lib/cairn-appliance/firstboot.done")))
        st = json.loads(self.read("var/lib/cairn-appliance/firstboot.json"))
        self.assertIs(st["ok"], False)
        self.assertTrue(any(message in e for e in st["errors"]), st["errors"])
        self.assertEqual(st["steps"], [])  # nothing was done
        p = subprocess.run([EXE, "status", "--json"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["firstboot"]["state"], "failed")
        self.assertTrue(any(message in e for e in doc["firstboot"]["errors"]))
        self.assertTrue(any(message in e for e in doc["problems"]))
        p = subprocess.run([EXE, "status"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertIn("First boot: failed", p.stdout)
        self.assertIn(message, p.stdout)

    def test_unknown_role(self):
        self.run_case(*CASES["unknown role"])

    def test_malformed_volume(self):
        self.run_case(*CASES["malformed volume"])

    def test_missing_disk(self):
        self.run_case(*CASES["missing disk"])

    def test_unreachable_etcd(self):
        self.run_case(*CASES["unreachable etcd"])

    def test_done_marker_skips(self):
        os.makedirs(os.path.join(self.root, "var/lib/cairn-appliance"))
        open(os.path.join(self.root, "var/lib/cairn-appliance/firstboot.done"), "w").close()
        p = subprocess.run([EXE, "firstboot"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertIn("already configured", p.stdout)


class VolumeHealthTest(unittest.TestCase):
    def brick(self, state, pending=0):
        return {"node": "n", "path": f"/b{id(state)}", "state": state, "pending_heal": pending}

    def test_states(self):
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [self.brick("up"), self.brick("up")]})
        self.assertEqual(h["health"], "healthy")
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [self.brick("up", 3), self.brick("up")]})
        self.assertEqual((h["health"], h["pending_heal"]), ("healing", 3))
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [self.brick("up"), self.brick("down")]})
        self.assertEqual((h["health"], len(h["down"])), ("degraded", 1))
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [self.brick("down")]})
        self.assertEqual(h["health"], "down")
        # as cairn --json volume status spells it
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [
            {"node": "n", "path": "/b1", "state": "Down", "online": False, "pending_heal": 0},
            {"node": "n", "path": "/b2", "state": "Up", "online": True, "pending_heal": 0}]})
        self.assertEqual((h["health"], h["down"]), ("degraded", ["n:/b1"]))
        h = status.volume_health({"name": "v", "status": "Started", "bricks": [
            {"node": "n", "path": "/b1", "state": "Healing", "online": True, "pending_heal": 0}]})
        self.assertEqual(h["health"], "healing")
        h = status.volume_health({"name": "v", "status": "Stopped", "bricks": [self.brick("down")]})
        self.assertEqual(h["health"], "stopped")


if __name__ == "__main__":
    unittest.main()
