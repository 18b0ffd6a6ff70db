#!/usr/bin/env python3
"""The idempotent steps first boot and the Ansible roles run (cairn_appliance/ensure.py,
`cairn-appliance ensure ...`), against a real etcd and cairnd on 127.0.0.1 and the real
`cairn` CLI: the first call changes something, the second reports nothing changed (what
makes site.yml's second run `changed=0`), and a conflicting request fails with a message.
The gateway conf dirs do not exist here, so exports, shares and LUNs are only stored (the
CLI applies them locally only on a gateway).

Env: CAIRN_BIN_DIR (cairnd, cairn; default backend/target/debug).
Run: python3 -m unittest tests/appliance/test_firstboot_ensure.py
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "appliance", "lib"))

from cairn_appliance import ensure  # noqa: E402

BIN = os.environ.get("CAIRN_BIN_DIR") or os.path.join(REPO, "backend", "target", "debug")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready after {timeout}s")


class EnsureTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for b in ("cairnd", "cairn"):
            if not os.access(os.path.join(BIN, b), os.X_OK):
                raise AssertionError(f"no {b} in {BIN}: build the backend (cargo build) or set CAIRN_BIN_DIR")
        if not shutil.which("etcd"):
            raise AssertionError("etcd is not installed (etcd-server)")
        root = os.path.join(REPO, "build", "test-tmp")
        os.makedirs(root, exist_ok=True)
        cls.tmp = tempfile.mkdtemp(prefix="appliance-ensure.", dir=root)
        cls.procs = []
        cls.logs = []
        ec, ep, cp = free_port(), free_port(), free_port()
        cls.node = "ensure-node"
        cls.addr = f"127.0.0.1:{cp}"
        log = open(os.path.join(cls.tmp, "etcd.log"), "w")
        cls.logs.append(log)
        cls.procs.append(subprocess.Popen(
            ["etcd", "--name", "e", "--data-dir", os.path.join(cls.tmp, "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{ec}",
             "--advertise-client-urls", f"http://127.0.0.1:{ec}",
             "--listen-peer-urls", f"http://127.0.0.1:{ep}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{ep}",
             "--initial-cluster", f"e=http://127.0.0.1:{ep}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

        def etcd_ok():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ec}/health", timeout=1) as r:
                    return json.load(r).get("health") == "true"
            except OSError:
                return False
        wait(etcd_ok, 30, "etcd")
        log = open(os.path.join(cls.tmp, "cairnd.log"), "w")
        cls.logs.append(log)
        cls.procs.append(subprocess.Popen(
            [os.path.join(BIN, "cairnd"), "--name", cls.node, "--listen", cls.addr,
             "--etcd", f"http://127.0.0.1:{ec}", "--state-dir", os.path.join(cls.tmp, "state")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        ensure.CAIRN = os.path.join(BIN, "cairn")
        ensure.MOUNT_CAIRN = os.path.join(BIN, "mount-cairn")
        # nothing applied locally: no gateway conf dirs here
        os.environ.update({
            "CAIRN_HOST": cls.addr,
            "CAIRN_NFS_CONF_DIR": os.path.join(cls.tmp, "no-ganesha"),
            "CAIRN_SMB_CONF_DIR": os.path.join(cls.tmp, "no-samba"),
            "CAIRN_ISCSI_CONF_DIR": os.path.join(cls.tmp, "no-lio"),
        })

        def cairnd_ok():
            return ensure.cairn(["--json", "pool", "list"], check=False).returncode == 0
        wait(cairnd_ok, 30, "cairnd")
        cls.bricks = []
        for i in (1, 2):
            d = os.path.join(cls.tmp, "bricks", f"b{i}")
            os.makedirs(d)
            cls.bricks.append(f"{cls.node}:{d}")

    @classmethod
    def tearDownClass(cls):
        for p in reversed(cls.procs):
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in cls.logs:
            f.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_1_volume(self):
        self.assertTrue(ensure.volume("vol0", 2, self.bricks, force=True))
        info = ensure.cairn_json(["volume", "info", "vol0"])["volumes"][0]
        self.assertEqual(info["status"], "Started")
        self.assertFalse(ensure.volume("vol0", 2, self.bricks, force=True))
        # the same name with other bricks is refused, not changed behind the user's back
        with self.assertRaises(ensure.CairnError) as cm:
            ensure.volume("vol0", 2, list(reversed(self.bricks)), force=True)
        self.assertIn("exists with bricks", str(cm.exception))
        with self.assertRaises(ensure.CairnError) as cm:
            ensure.volume("vol0", 1, self.bricks, force=True)
        self.assertIn("replica", str(cm.exception))

    def test_2_option_and_peer(self):
        self.assertTrue(ensure.volume_option("vol0", "performance.cache-timeout", "2"))
        self.assertFalse(ensure.volume_option("vol0", "performance.cache-timeout", "2"))
        self.assertFalse(ensure.peer(self.addr))  # itself: already in the pool
        with self.assertRaises(ensure.CairnError):
            ensure.peer(f"127.0.0.1:{free_port()}")  # nothing there

    def test_3_nfs_export(self):
        self.assertTrue(ensure.nfs_export("vol0", "/vol0", "*"))
        self.assertFalse(ensure.nfs_export("vol0", "/vol0", "*"))
        # changed settings replace the export
        self.assertTrue(ensure.nfs_export("vol0", "/vol0", "10.0.0.0/24", access="ro"))
        self.assertFalse(ensure.nfs_export("vol0", "/vol0", "10.0.0.0/24", access="ro"))
        ex = ensure.cairn_json(["nfs", "export", "show", "/vol0"])["export"]
        self.assertEqual((ex["clients"], ex["access"]), (["10.0.0.0/24"], "ro"))

    def test_4_smb_share(self):
        self.assertTrue(ensure.smb_share("vol0", "vol0"))
        self.assertFalse(ensure.smb_share("vol0", "vol0"))

    def test_5_iscsi(self):
        self.assertTrue(ensure.iscsi_lun("lun0", "vol0", "4M", thin=True))
        self.assertFalse(ensure.iscsi_lun("lun0", "vol0", "4M", thin=True))
        iqn = "iqn.2026-11.io.cairn:ensure"
        self.assertTrue(ensure.iscsi_target(iqn, ["lun0"]))
        self.assertFalse(ensure.iscsi_target(iqn, ["lun0"]))

    def test_6_cli_json_for_ansible(self):
        """`cairn-appliance ensure` prints what Ansible's changed_when reads."""
        exe = os.path.join(REPO, "appliance", "bin", "cairn-appliance")
        env = {**os.environ, "CAIRN_CLI": ensure.CAIRN}
        p = subprocess.run([exe, "ensure", "volume", "vol0", "--replica", "2", "--force",
                            "--options-json", '{"performance.cache-timeout": "2"}', *self.bricks],
                           capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), {"changed": False})
        p = subprocess.run([exe, "ensure", "smb-share", "other", "--volume", "nosuchvol"],
                           capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 1)
        out = json.loads(p.stdout)
        self.assertTrue(out["failed"])
        self.assertIn("nosuchvol", out["msg"])

    def test_7_root_mode(self):
        """site.yml's volume `mode`: the root of a new volume is 0755 (root's); set it to
        1777 through a private FUSE mount, once."""
        self.assertTrue(ensure.volume_root_mode("vol0", 0o1777))
        self.assertFalse(ensure.volume_root_mode("vol0", 0o1777))
        with tempfile.TemporaryDirectory(dir=self.tmp) as mnt:
            subprocess.run([ensure.MOUNT_CAIRN, f"{self.addr}:/vol0", mnt], check=True)
            try:
                self.assertEqual(os.stat(mnt).st_mode & 0o7777, 0o1777)
            finally:
                subprocess.run(["fusermount3", "-u", mnt], check=False)
        # the owner too (first boot's and the docs' 65534:65534)
        self.assertTrue(ensure.volume_root_mode("vol0", 0o1777, owner=(65534, 65534)))
        self.assertFalse(ensure.volume_root_mode("vol0", 0o1777, owner=(65534, 65534)))
        with tempfile.TemporaryDirectory(dir=self.tmp) as mnt:
            subprocess.run([ensure.MOUNT_CAIRN, f"{self.addr}:/vol0", mnt], check=True)
            try:
                st = os.stat(mnt)
                self.assertEqual((st.st_uid, st.st_gid, st.st_mode & 0o7777), (65534, 65534, 0o1777))
            finally:
                subprocess.run(["fusermount3", "-u", mnt], check=False)
        self.assertTrue(ensure.volume_root_mode("vol0", 0o755, owner=(0, 0)))
        with self.assertRaises(ensure.CairnError) as cm:
            ensure.volume_root_mode("nosuchvol", 0o1777)
        self.assertIn("nosuchvol", str(cm.exception))

    def test_8_gateway_credential(self):
        """First boot's gateway certificate: role gateway, CN = the node, vol0 only, 0600,
        named by gateway.env; kept when the volumes are the same, re-issued when not."""
        d = os.path.join(self.tmp, "gw")
        os.makedirs(d)
        pem, env = os.path.join(d, "gateway.pem"), os.path.join(d, "gateway.env")
        ca_dir = os.environ.get("CAIRN_CA_DIR") or os.path.join(self.tmp, "state")
        gw = lambda vols: ensure.gateway_credential("ensure-gw", vols, pem=pem, env_file=env, ca_dir=ca_dir)
        self.assertTrue(gw(["vol0"]))
        self.assertEqual(os.stat(pem).st_mode & 0o777, 0o600)
        with open(env) as f:
            self.assertIn(f"CAIRN_CREDENTIALS={pem}\n", f.read())
        out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName", "-in", pem],
                             capture_output=True, text=True, check=True).stdout
        self.assertIn("CN = ensure-gw", out)
        self.assertIn("role=gateway", out)
        self.assertIn("volumes=vol0", out)
        certs = ensure.cairn_json(["client", "certificate", "list"])["certificates"]
        self.assertTrue(any(c["name"] == "ensure-gw" and c["role"] == "gateway" and c["volumes"] == ["vol0"]
                            for c in certs), certs)
        serial = out
        self.assertFalse(gw(["vol0"]))
        self.assertTrue(gw(["vol0", "vol1"]))
        out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName", "-in", pem],
                             capture_output=True, text=True, check=True).stdout
        self.assertNotEqual(out, serial)
        self.assertIn("vol0", out)
        self.assertIn("vol1", out)
        with self.assertRaises(ensure.CairnError):
            gw([])


if __name__ == "__main__":
    unittest.main()
