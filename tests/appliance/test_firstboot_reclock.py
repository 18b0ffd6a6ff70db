#!/usr/bin/env python3
"""The CTDB lock helper's own etcd identity on a gateway (docs/security.md, "etcd"):
`cairn-appliance etcd-tls install-reclock` (what first boot runs on an all-in-one node;
Ansible's gateway role installs the same files) puts the certificate of etcd user
cairn-reclock in /etc/cairn/etcd-reclock, root only, and appliance/ha/ctdb-etcd-reclock
without --tls presents it rather than the node's certificate from appliance.env: against a
real etcd with TLS and auth it takes the lock, and it cannot take a lock on, read or write
any other key, where the node's certificate could.
Run: python3 -m unittest tests/appliance/test_firstboot_reclock.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "appliance", "lib"))
sys.path.insert(0, HERE)

from cairn_appliance import render  # noqa: E402
from test_firstboot_config import _tls_etcd  # noqa: E402

TOOL = os.path.join(HERE, "..", "..", "appliance", "bin", "cairn-appliance")
HELPER = os.path.join(HERE, "..", "..", "appliance", "ha", "ctdb-etcd-reclock")
LOCK_KEY = "/cairn/ha/ctdb/reclock"


class ReclockIdentityTest(unittest.TestCase):
    def test_installed_reclock_identity_is_the_lock_only(self):
        d = tempfile.mkdtemp(prefix="reclock-identity.")
        proc = log = holder = None
        try:
            env = {**os.environ, "CAIRN_APPLIANCE_ROOT": d}
            etc = os.path.join(d, "etc", "cairn")
            ca = os.path.join(etc, "etcd-ca")

            def tool(*args):
                p = subprocess.run([TOOL, "etcd-tls", *args], capture_output=True, text=True,
                                   env=env, timeout=120)
                self.assertEqual(p.returncode, 0, f"etcd-tls {' '.join(args)}: {p.stdout}{p.stderr}")
                return json.loads(p.stdout)["changed"]
            # before auth made its certificate: a clear refusal, nothing installed
            tool("ca")
            p = subprocess.run([TOOL, "etcd-tls", "install-reclock"], capture_output=True,
                               text=True, env=env)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("cairn-reclock.pem", json.loads(p.stdout)["msg"])
            tool("client", "cairn-g1")
            proc, log, url, _ = _tls_etcd(self, d, ca)
            tool("auth", "--endpoint", url, "--user", "cairn-g1")
            self.assertTrue(tool("install-reclock"))
            self.assertFalse(tool("install-reclock"), "a second install changed something")
            rdir = os.path.join(etc, "etcd-reclock")
            want = {"": 0o700, "/ca.pem": 0o644, "/client.pem": 0o644, "/client-key.pem": 0o600}
            for f, mode in want.items():
                st = os.stat(rdir + f)
                self.assertEqual((oct(st.st_mode & 0o7777), st.st_uid, st.st_gid), (oct(mode), 0, 0),
                                 "etcd-reclock" + f)
            subj = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", f"{rdir}/client.pem"],
                                  capture_output=True, text=True).stdout
            self.assertIn("CN = cairn-reclock", subj)

            def ctl(cert, key, *args):
                return subprocess.run(
                    ["etcdctl", "--endpoints", url, "--cacert", f"{rdir}/ca.pem", "--cert", cert,
                     "--key", key, "--dial-timeout", "3s", "--command-timeout", "5s", *args],
                    capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
            node = (f"{ca}/cairn-g1.pem", f"{ca}/cairn-g1-key.pem")
            mine = (f"{rdir}/client.pem", f"{rdir}/client-key.pem")
            self.assertEqual(ctl(*node, "put", "/cairn/volumes/vol0", "{}").returncode, 0)
            # the installed identity: no other key, read or write
            for args in (("get", "/cairn/volumes/vol0"), ("get", "/cairn", "--prefix"),
                         ("put", "/cairn/peers/evil", "x"), ("del", "/cairn/volumes/vol0")):
                r = ctl(*mine, *args)
                self.assertNotEqual(r.returncode, 0, f"cairn-reclock may {' '.join(args)}: {r.stdout}")
                self.assertIn("permission denied", r.stderr, " ".join(args))

            # the helper on a gateway: appliance.env names the node's own certificate
            # (cairn-g1, all of /cairn); the installed identity must win over it
            appliance_env = os.path.join(d, "appliance.env")
            with open(appliance_env, "w") as f:
                f.write(render.appliance_env("gateway", "g1", "auto", [url],
                                             etcd_tls=(f"{ca}/ca.pem", *node)))
            henv = {**os.environ, "CAIRN_APPLIANCE_ENV": appliance_env, "CAIRN_RECLOCK_TLS_DIR": rdir}

            def once(key):
                """The helper's answer; one that takes the lock holds it: killed after 15 s"""
                try:
                    p = subprocess.run([HELPER, url, key, "3"], capture_output=True, text=True,
                                       timeout=15, env=henv)
                except subprocess.TimeoutExpired as e:
                    out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
                    return out, "(it took the lock and held it)"
                return p.stdout, p.stderr
            holder = subprocess.Popen([HELPER, url, LOCK_KEY, "3"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=henv)
            self.assertEqual(holder.stdout.read(1), b"0",
                             "the helper with the installed cairn-reclock identity did not take the lock")
            self.assertEqual(once(LOCK_KEY)[0], "1", "a second helper: contention")
            out, err = once("/cairn/volumes/lock")
            self.assertEqual(out, "3", "the helper took a lock outside its key: it presented the "
                                       "node's certificate, not cairn-reclock's: " + err)
            self.assertIn("permission denied", err)
            r = ctl(*node, "get", LOCK_KEY, "--print-value-only")
            self.assertTrue(r.stdout.strip(), f"the lock key is not held: {r.stdout}{r.stderr}")
            # without the installed identity the helper falls back to appliance.env's
            holder.terminate()
            holder.wait(20)
            holder.stdout.close()
            holder.stderr.close()
            henv["CAIRN_RECLOCK_TLS_DIR"] = os.path.join(d, "none")
            holder = subprocess.Popen([HELPER, url, "/cairn/volumes/lock", "3"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=henv)
            self.assertEqual(holder.stdout.read(1), b"0",
                             "without etcd-reclock the helper uses the node's certificate")
        finally:
            for p in (holder, proc):
                if p and p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
            if holder:
                holder.stdout.close()
                holder.stderr.close()
            if log:
                log.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
