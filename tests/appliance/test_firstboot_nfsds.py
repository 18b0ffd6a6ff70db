#!/usr/bin/env python3
"""A node with bricks runs a pNFS data server (docs/nfs.md "pNFS", docs/appliance.md):
what first boot and `cairn-appliance setup-ds` (Ansible's brick role) write and start,
against a scratch root (CAIRN_APPLIANCE_ROOT) with a fake systemctl: the DS's ganesha.conf
(scripts/nfs-ganesha.sh's nfs_render_ds_config: NFSv4.1+, DS only, every address, port
20490, the DS blocks of `cairn nfs sync --ds` included), its private bus's config, the
units' env (the node's certificate, that bus), the three units enabled and started, a
second run changing nothing; and the unit files agree with those paths. That the DS
these files describe serves a volume is tests/nfs/pnfs-appliance.sh.
Run: python3 -m unittest tests/appliance/test_firstboot_nfsds.py
"""

import configparser
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
UNITS = os.path.join(REPO, "appliance", "systemd")
DS_UNITS = ["cairn-nfs-ds-bus.service", "cairn-nfs-ds.service", "cairn-nfs-ds-sync.service"]

# systemctl that keeps the enabled and active units in files under the scratch root
FAKE_SYSTEMCTL = """#!/bin/bash
echo "$*" >>"$CAIRN_APPLIANCE_ROOT/systemctl.log"
st=$CAIRN_APPLIANCE_ROOT/systemd-state; mkdir -p "$st"
case $1 in
is-enabled) [[ -e $st/enabled.${@: -1} ]] ;;
is-active) [[ -e $st/active.${@: -1} ]] ;;
enable) touch "$st/enabled.$2" ;;
start|restart) touch "$st/active.$2" ;;
esac
"""


def unit(name):
    c = configparser.ConfigParser(strict=False, interpolation=None)
    c.optionxform = str
    with open(os.path.join(UNITS, name), encoding="utf-8") as f:
        c.read_string(f.read())
    return c


class DataServerSetupTest(unittest.TestCase):
    def setUp(self):
        tmp = os.path.join(REPO, "build", "test-tmp")
        os.makedirs(tmp, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="appliance-nfsds.", dir=tmp)
        bindir = os.path.join(self.root, "bin")
        os.makedirs(bindir)
        with open(os.path.join(bindir, "systemctl"), "w") as f:
            f.write(FAKE_SYSTEMCTL)
        os.chmod(os.path.join(bindir, "systemctl"), 0o755)
        self.env = {**os.environ, "CAIRN_APPLIANCE_ROOT": self.root,
                    "CAIRN_APPLIANCE_LIBEXEC": REPO, "PATH": f"{bindir}:{os.environ['PATH']}"}

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def read(self, rel):
        with open(os.path.join(self.root, rel.lstrip("/")), encoding="utf-8") as f:
            return f.read()

    def setup_ds(self):
        p = subprocess.run([EXE, "setup-ds"], capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return json.loads(p.stdout)

    def test_setup_ds_writes_and_starts_the_data_server(self):
        out = self.setup_ds()
        self.assertTrue(out["changed"], out)
        self.assertTrue(any("pNFS data server" in s and "20490" in s for s in out["steps"]), out)
        conf = self.read("/var/lib/cairn/nfs-ds/ganesha.conf")
        for want in ("Bind_Addr = 0.0.0.0;", "NFS_Port = 20490;", "Protocols = 4;",
                     "Enable_NLM = false;", "Minor_Versions = 1, 2;", "PNFS_MDS = false;",
                     "PNFS_DS = true;", "Server_Owner = ",
                     f'%include "{self.root}/etc/ganesha/cairn-ds/exports.conf"'):
            self.assertIn(want, conf)
        self.assertNotIn("Plugins_Dir", conf)  # Ganesha's own FSAL dir on the appliance
        self.assertEqual(self.read("/etc/ganesha/cairn-ds/exports.conf"), "")
        env = self.read("/etc/cairn/nfs-ds.env")
        self.assertIn(f"CAIRN_CREDENTIALS={self.root}/var/lib/cairn/node/node.pem\n", env)
        bus = f"{self.root}/run/cairn-nfs-ds/dbus.sock"
        self.assertIn(f"DBUS_SYSTEM_BUS_ADDRESS=unix:path={bus}\n", env)
        self.assertIn(f"<listen>unix:path={bus}</listen>", self.read("/var/lib/cairn/nfs-ds/dbus.conf"))
        os.makedirs(os.path.dirname(bus))  # the bus unit's RuntimeDirectory
        p = subprocess.run(["dbus-daemon", "--config-file",
                            os.path.join(self.root, "var/lib/cairn/nfs-ds/dbus.conf"), "--print-address",
                            "--fork", "--print-pid"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, f"dbus-daemon refuses the bus config: {p.stderr}")
        os.kill(int(p.stdout.split()[-1]), 15)
        log = self.read("systemctl.log").splitlines()
        for u in DS_UNITS:
            self.assertIn(f"enable {u}", log)
            self.assertTrue(f"start {u}" in log or f"restart {u}" in log, log)
        # again: nothing to change, nothing restarted
        os.remove(os.path.join(self.root, "systemctl.log"))
        out = self.setup_ds()
        self.assertFalse(out["changed"], out)
        self.assertFalse([c for c in self.read("systemctl.log").splitlines()
                          if c.split()[0] in ("enable", "start", "restart")])
        # a changed config restarts the data server
        with open(os.path.join(self.root, "var/lib/cairn/nfs-ds/ganesha.conf"), "a") as f:
            f.write("# edited\n")
        out = self.setup_ds()
        self.assertTrue(out["changed"], out)
        self.assertIn("restart cairn-nfs-ds.service", self.read("systemctl.log"))

    def test_units_use_the_rendered_files(self):
        ds = unit("cairn-nfs-ds.service")
        svc = ds["Service"]
        self.assertEqual(svc["EnvironmentFile"], "/etc/cairn/nfs-ds.env")
        self.assertIn("-f /var/lib/cairn/nfs-ds/ganesha.conf", svc["ExecStart"])
        self.assertIn("-p /run/ganesha-ds/ganesha.pid", svc["ExecStart"])
        self.assertEqual(svc["RuntimeDirectory"], "ganesha-ds")
        self.assertTrue(svc["ExecStartPost"].endswith("cairn-wait-port 127.0.0.1 20490 90"))
        self.assertIn("cairn-nfs-ds-bus.service", ds["Unit"]["Requires"])
        self.assertEqual(ds["Unit"]["ConditionPathExists"], "/var/lib/cairn/nfs-ds/ganesha.conf")
        bus = unit("cairn-nfs-ds-bus.service")
        self.assertIn("--config-file=/var/lib/cairn/nfs-ds/dbus.conf", bus["Service"]["ExecStart"])
        # started once the socket exists (Ganesha connects to it at its start)
        self.assertIn("[ -S /run/cairn-nfs-ds/dbus.sock ]", bus["Service"]["ExecStartPost"])
        # a shell $ is written $$ (systemd expands $VAR itself)
        self.assertNotIn("$", bus["Service"]["ExecStartPost"].replace("$$", ""))
        self.assertEqual(bus["Service"]["RuntimeDirectory"], "cairn-nfs-ds")  # /run/cairn-nfs-ds/dbus.sock
        sync = unit("cairn-nfs-ds-sync.service")["Service"]
        self.assertTrue(sync["ExecStart"].endswith("nfs sync --watch --ds"), sync["ExecStart"])
        self.assertEqual(sync["Environment"], "CAIRN_NFS_CONF_DIR=/etc/ganesha/cairn-ds")
        self.assertEqual(sync["ReadWritePaths"], "/etc/ganesha/cairn-ds")
        self.assertEqual(sync["EnvironmentFile"], "/etc/cairn/nfs-ds.env")
        # not the gateway's: its own pid file, log, config and export dir
        gw = unit("cairn-nfs.service")["Service"]["ExecStart"]
        for word in ("-f", "-L", "-p"):
            mine = svc["ExecStart"].split(word + " ")[1].split()[0]
            self.assertNotIn(mine, gw)

    def test_first_boot_runs_it_on_nodes_with_bricks_only(self):
        sys.path.insert(0, os.path.join(REPO, "appliance", "lib"))
        from cairn_appliance import config
        self.assertTrue(config.Config(role="brick").has_bricks)
        self.assertTrue(config.Config(role="all-in-one").has_bricks)
        self.assertFalse(config.Config(role="gateway").has_bricks)
        with open(os.path.join(REPO, "appliance", "lib", "cairn_appliance", "firstboot.py")) as f:
            src = f.read()
        self.assertIn("    if cfg.has_bricks:\n", src)
        self.assertIn("            ds_setup(st)\n        except StepError", src)


if __name__ == "__main__":
    unittest.main()
