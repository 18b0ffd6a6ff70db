#!/usr/bin/env python3
"""Unit tests of the appliance's first-boot config: the `cairn:` user-data parser and
validator (appliance/lib/cairn_appliance/config.py), the machine checks with a fake probe
(facts.py), and the files it renders (render.py). Each bad input must give its own clear
message, naming the key. Run: python3 -m unittest tests/appliance/test_firstboot_config.py
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "appliance", "lib"))

from cairn_appliance import config, facts, render  # noqa: E402
from cairn_appliance.config import ConfigError  # noqa: E402


class self_raises:
    def __enter__(self):
        self.exception = None
        return self

    def __exit__(self, typ, val, tb):
        if typ is None:
            raise AssertionError("no ConfigError raised")
        if not issubclass(typ, ConfigError):
            return False
        self.exception = val
        return True


class DefaultTest(unittest.TestCase):
    def test_no_user_data_is_all_in_one(self):
        for text in (None, "", "   \n", "#cloud-config\n", "#cloud-config\nssh_authorized_keys: [k]\n"):
            cfg = config.parse(text)
            self.assertEqual(cfg.role, "all-in-one", text)
            self.assertEqual((cfg.volume.name, cfg.volume.replica, cfg.volume.bricks), ("vol0", 2, 2))
            self.assertTrue(cfg.nfs and cfg.smb and cfg.iscsi)
            self.assertIsNone(cfg.disks)  # autodetect
            self.assertEqual(cfg.etcd, [])
            self.assertTrue(cfg.runs_etcd and cfg.has_bricks and cfg.is_gateway)

    def test_shell_script_and_multipart_user_data_carry_no_section(self):
        self.assertEqual(config.parse("#!/bin/sh\necho cairn: role\n").role, "all-in-one")
        self.assertEqual(config.parse("Content-Type: multipart/mixed; boundary=x\n\n--x\n").role,
                         "all-in-one")

    def test_brick_role(self):
        cfg = config.parse("#cloud-config\ncairn:\n  role: brick\n  cluster:\n"
                           "    etcd: http://10.0.0.1:2379, http://10.0.0.2:2379/\n"
                           "    token: s3cret\n  disks: [/dev/vdb, /dev/vdc]\n")
        self.assertEqual(cfg.role, "brick")
        self.assertEqual(cfg.etcd, ["http://10.0.0.1:2379", "http://10.0.0.2:2379"])
        self.assertEqual(cfg.disks, ["/dev/vdb", "/dev/vdc"])
        self.assertFalse(cfg.runs_etcd)
        self.assertFalse(cfg.is_gateway)
        self.assertEqual(cfg.to_json()["token"], "********")

    def test_brick_enrolls_with_join_and_ca_hash(self):
        h = "sha256:" + "AB" * 32
        cfg = config.parse("cairn:\n  role: brick\n  cluster:\n    etcd: [http://10.0.0.1:2379]\n"
                           f"    token: t\n    join: 10.0.0.1\n    ca_cert_hash: {h}\n")
        self.assertEqual(cfg.join, "10.0.0.1:7420")  # the default port added
        self.assertEqual(cfg.ca_cert_hash, h.lower())
        env = render.parse_env(render.appliance_env("brick", "n2", "auto", cfg.etcd, cfg.join,
                                                    cfg.ca_cert_hash))
        self.assertEqual(env["CAIRN_JOIN"], "10.0.0.1:7420")
        self.assertEqual(env["CAIRN_CA_CERT_HASH"], h.lower())
        for text, want in [("node1.example:7421", "node1.example:7421"),
                           ("[fd00::1]:7420", "[fd00::1]:7420"), ("[fd00::2]", "[fd00::2]:7420")]:
            self.assertEqual(config.join_address(text), want)
        # without them, appliance.env names no member
        self.assertNotIn("CAIRN_JOIN", render.parse_env(render.appliance_env("brick", "n", "auto", [])))

    def test_gateway_role(self):
        cfg = config.parse("cairn:\n  role: gateway\n  address: 10.0.0.9\n  smb: false\n"
                           "  cluster: {etcd: [https://etcd.example:2379]}\n")
        self.assertTrue(cfg.is_gateway and not cfg.has_bricks)
        self.assertFalse(cfg.smb)
        self.assertEqual(cfg.address, "10.0.0.9")

    def test_all_in_one_volume_and_disks(self):
        cfg = config.parse("cairn:\n  volume: {name: data, replica: 3, bricks: 6}\n  disks: []\n")
        self.assertEqual((cfg.volume.name, cfg.volume.replica, cfg.volume.bricks), ("data", 3, 6))
        self.assertEqual(cfg.disks, [])  # no data disk: the root disk


class BadInputTest(unittest.TestCase):
    def one(self, text, *needles):
        with self_raises() as cm:
            config.parse(text)
        msg = "\n".join(cm.exception.problems)
        for n in needles:
            self.assertIn(n, msg)
        return cm.exception.problems

    def test_unknown_role(self):
        p = self.one("cairn:\n  role: storage\n", "cairn.role", "unknown role 'storage'",
                     "all-in-one, brick, gateway")
        self.assertEqual(len(p), 1)

    def test_malformed_volume_specs(self):
        self.one("cairn:\n  volume: {replica: 5}\n", "cairn.volume.replica", "from 1 to 3", "got 5")
        self.one("cairn:\n  volume: {replica: 2, bricks: 3}\n", "cairn.volume.bricks",
                 "3 bricks do not make whole replica sets of 2")
        self.one("cairn:\n  volume: {name: 'vol 0'}\n", "cairn.volume.name", "'vol 0'")
        self.one("cairn:\n  volume: {name: all}\n", "cairn.volume.name", "not 'all'")
        self.one("cairn:\n  volume: {replica: two}\n", "cairn.volume.replica", "whole number", "'two'")
        self.one("cairn:\n  volume: {replica: true}\n", "cairn.volume.replica", "whole number")
        self.one("cairn:\n  volume: vol0\n", "cairn.volume: must be a mapping")
        self.one("cairn:\n  volume: {name: v, stripe: 2}\n", "cairn.volume: unknown key(s) stripe")
        self.one("cairn:\n  volume: {bricks: 0}\n", "cairn.volume.bricks", "from 1 to 24")

    def test_volume_only_for_all_in_one(self):
        self.one("cairn:\n  role: brick\n  cluster: {etcd: [http://e:2379]}\n  volume: {name: v}\n",
                 "cairn.volume: only an all-in-one node")

    def test_joining_roles_need_etcd(self):
        self.one("cairn:\n  role: brick\n", "cairn.cluster.etcd", "role brick joins a cluster")
        self.one("cairn:\n  role: gateway\n  cluster: {token: x}\n", "cairn.cluster.etcd")

    def test_bad_enrollment_values(self):
        base = "cairn:\n  role: brick\n  cluster:\n    etcd: [http://e:2379]\n    token: t\n"
        h = "sha256:" + "0" * 64
        self.one(base + f"    join: 'h:99999'\n    ca_cert_hash: {h}\n", "cairn.cluster.join",
                 "port '99999' is not 1-65535")
        self.one(base + f"    join: 'fd00::1'\n    ca_cert_hash: {h}\n", "cairn.cluster.join",
                 "[ADDR]:PORT")
        self.one(base + f"    join: 'bad host!'\n    ca_cert_hash: {h}\n", "cairn.cluster.join",
                 "not a host name or IP address")
        self.one(base + f"    join: ''\n    ca_cert_hash: {h}\n", "cairn.cluster.join", "HOST:PORT")
        self.one(base + "    join: h\n    ca_cert_hash: sha256:12\n", "cairn.cluster.ca_cert_hash",
                 "not sha256: and 64 hex digits")
        self.one(base + f"    join: h\n    ca_cert_hash: 'md5:{'0' * 64}'\n",
                 "cairn.cluster.ca_cert_hash")
        p = self.one(base + "    join: h\n", "cairn.cluster.ca_cert_hash: cluster.join needs it")
        self.assertEqual(len(p), 1)
        self.one(base + f"    ca_cert_hash: {h}\n", "cairn.cluster.join: cluster.ca_cert_hash needs it")
        self.one("cairn:\n  role: brick\n  cluster:\n    etcd: [http://e:2379]\n    join: h\n"
                 f"    ca_cert_hash: {h}\n", "cairn.cluster.token: enrolling")
        self.one(base + "    joins: h\n", "unknown key(s) joins", "known: etcd, token, join, ca_cert_hash")

    def test_bad_etcd_urls(self):
        self.one("cairn:\n  role: brick\n  cluster: {etcd: [10.0.0.1]}\n",
                 "cairn.cluster.etcd: '10.0.0.1' is not an etcd client URL")
        self.one("cairn:\n  role: brick\n  cluster: {etcd: ['http://h:x']}\n", "is not an etcd client URL")
        self.one("cairn:\n  role: brick\n  cluster: {etcd: []}\n", "must be a list of etcd client URLs")
        p = self.one("cairn:\n  role: brick\n  cluster: {etcd: [ftp://h:1]}\n", "ftp://h:1")
        self.assertEqual(len(p), 1)  # no second "needs etcd" message

    def test_all_in_one_joins_nothing(self):
        self.one("cairn:\n  cluster: {etcd: [http://e:2379]}\n", "cairn.cluster: an all-in-one node")

    def test_bad_disks(self):
        self.one("cairn:\n  disks: [vdb]\n", "cairn.disks: 'vdb' is not a device path")
        self.one("cairn:\n  disks: [/dev/vdb, /dev/vdb]\n", "/dev/vdb is listed twice")
        self.one("cairn:\n  disks: {a: b}\n", "cairn.disks: must be a list")
        self.one("cairn:\n  role: gateway\n  cluster: {etcd: [http://e:2379]}\n  disks: [/dev/vdb]\n",
                 "a gateway holds no bricks")

    def test_other_keys(self):
        self.one("cairn:\n  rol: brick\n", "cairn: unknown key(s) rol")
        self.one("cairn:\n  nfs: yes please\n", "cairn.nfs: must be true or false")
        self.one("cairn:\n  address: 10.0.0.300\n", "cairn.address: '10.0.0.300' is not an IP address")
        self.one("cairn:\n  node_name: -bad\n", "cairn.node_name")
        self.one("cairn:\n  smb_user: root\n", "cairn.smb_user")
        self.one("cairn: [a, b]\n", "cairn: must be a mapping")
        self.one("cairn:\n  role: brick\n  cluster: {etcd: [http://e:2379], tokn: x}\n",
                 "cairn.cluster: unknown key(s) tokn")

    def test_not_yaml(self):
        self.one("#cloud-config\ncairn:\n  role: [brick\n", "not valid YAML", "line")

    def test_all_problems_at_once(self):
        p = self.one("cairn:\n  role: nas\n  volume: {replica: 9}\n  disks: [sdb]\n",
                     "cairn.role", "cairn.volume.replica", "cairn.disks")
        self.assertGreaterEqual(len(p), 3)


class FakeProbe:
    def __init__(self, devices=(), root="/dev/vda", mounted=None, etcd=None, addresses=None):
        self.devices, self.root, self.mounted = set(devices), root, mounted or {}
        self.etcd = etcd or {}
        self.addrs = ["127.0.0.1", "10.0.2.15"] if addresses is None else addresses
        self.asked = []

    def address_here(self, address):
        self.asked.append(address)
        return None if address in self.addrs else f"is not an address of this node (it has: {', '.join(self.addrs)})"

    def block_device(self, path):
        return None if path in self.devices else "does not exist"

    def holds_root(self, path):
        return path == self.root

    def in_use(self, path):
        return self.mounted.get(path)

    def etcd_health(self, url):
        return self.etcd.get(url, "cannot be reached: Connection refused")


class FactsTest(unittest.TestCase):
    def test_missing_data_disk(self):
        cfg = config.parse("cairn:\n  disks: [/dev/vdb]\n")
        p = facts.check_facts(cfg, FakeProbe(devices=["/dev/vdc"]))
        self.assertEqual(len(p), 1)
        self.assertIn("cairn.disks: data disk /dev/vdb does not exist", p[0])
        self.assertEqual(facts.check_facts(cfg, FakeProbe(devices=["/dev/vdb"])), [])

    def test_root_disk_and_mounted_disk(self):
        cfg = config.parse("cairn:\n  disks: [/dev/vda, /dev/vdb]\n")
        p = facts.check_facts(cfg, FakeProbe(devices=["/dev/vda", "/dev/vdb"],
                                             mounted={"/dev/vdb": "/home"}))
        self.assertIn("/dev/vda holds the root file system", p[0])
        self.assertIn("/dev/vdb is mounted at /home", p[1])
        # our own mount from an earlier, interrupted first boot is fine
        p = facts.check_facts(config.parse("cairn:\n  disks: [/dev/vdb]\n"),
                              FakeProbe(devices=["/dev/vdb"], mounted={"/dev/vdb": "/srv/cairn/disk1"}))
        self.assertEqual(p, [])

    def test_unreachable_etcd(self):
        cfg = config.parse("cairn:\n  role: gateway\n  cluster: {etcd: [http://a:2379, http://b:2379]}\n")
        p = facts.check_facts(cfg, FakeProbe())
        self.assertEqual(len(p), 1)
        self.assertIn("cairn.cluster.etcd: no etcd endpoint answers", p[0])
        self.assertIn("http://a:2379 cannot be reached: Connection refused", p[0])
        self.assertIn("http://b:2379", p[0])
        # one healthy endpoint is enough
        self.assertEqual(facts.check_facts(cfg, FakeProbe(etcd={"http://b:2379": None})), [])

    def test_address_not_on_this_node(self):
        # appliance-join: an advertised address the node did not have sent the node's own
        # mount off the node to whatever answered there (a TLS error, not this message)
        cfg = config.parse("cairn:\n  address: 192.168.78.11\n")
        p = facts.check_facts(cfg, FakeProbe())
        self.assertEqual(len(p), 1)
        self.assertIn("cairn.address: 192.168.78.11 is not an address of this node", p[0])
        self.assertIn("10.0.2.15", p[0])
        self.assertEqual(facts.check_facts(cfg, FakeProbe(addresses=["10.0.2.15", "192.168.78.11"])), [])
        # no cairn.address: nothing to check
        probe = FakeProbe()
        self.assertEqual(facts.check_facts(config.parse("cairn:\n  node_name: n1\n"), probe), [])
        self.assertEqual(probe.asked, [])

    def test_address_checked_before_etcd(self):
        cfg = config.parse("cairn:\n  role: brick\n  address: 192.168.78.12\n"
                           "  cluster: {etcd: [https://192.168.78.11:2379], token: t}\n")
        p = facts.check_facts(cfg, FakeProbe())
        self.assertEqual(len(p), 2)
        self.assertTrue(p[0].startswith("cairn.address: 192.168.78.12"), p)
        self.assertTrue(p[1].startswith("cairn.cluster.etcd"), p)

    def test_real_probe_on_this_machine(self):
        probe = facts.Probe()
        self.assertEqual(probe.block_device("/dev/cairn-no-such-disk"), "does not exist")
        self.assertEqual(probe.block_device("/dev/null"), "is not a block device")
        # nothing listens on port 1 of 127.0.0.1
        why = probe.etcd_health("http://127.0.0.1:1", timeout=2)
        self.assertTrue(why and why.startswith("cannot be reached"), why)
        self.assertIsNone(probe.address_here("127.0.0.1", timeout=0))
        why = probe.address_here("192.0.2.254", timeout=0)  # TEST-NET-1, on no interface here
        self.assertTrue(why and why.startswith("is not an address of this node after 0s"), why)


class LoadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def put(self, name, text):
        p = os.path.join(self.dir, name)
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_first_file_with_a_section_wins(self):
        cc = self.put("cloud-config.txt", "#cloud-config\nssh_pwauth: false\n")
        ud = self.put("user-data.txt", "#cloud-config\ncairn:\n  role: brick\n  cluster: {etcd: [http://e:2379]}\n")
        cfg = config.load((cc, ud))
        self.assertEqual(cfg.role, "brick")
        self.assertEqual(cfg.source, ud)

    def test_no_files_is_default(self):
        cfg = config.load((os.path.join(self.dir, "none1"), os.path.join(self.dir, "none2")))
        self.assertEqual((cfg.role, cfg.source), ("all-in-one", "default"))

    def test_bad_file_names_it(self):
        ud = self.put("user-data.txt", "cairn:\n  role: [\n")
        with self_raises() as cm:
            config.load((ud,))
        self.assertIn(ud, cm.exception.problems[0])


class RenderTest(unittest.TestCase):
    def test_firewall_ports(self):
        aio = render.firewall_ports(["all-in-one"])
        # etcd's client port: nodes join an all-in-one node by user-data (TLS, client
        # certificates); its peer port stays closed (the single member's is on loopback)
        self.assertEqual(aio["tcp"], [22, 111, 445, 2049, 2379, 3260, 7420, 20048, 20490, 32765, 32803])
        self.assertEqual(aio["udp"], [111, 32765])
        self.assertNotIn(2380, aio["tcp"])
        brick = render.firewall_ports(["brick"])
        # the pNFS data server on nodes with bricks (cairn-nfs-ds), not on gateways
        self.assertEqual(brick, {"tcp": [22, 7420, 20490], "udp": []})
        self.assertEqual(render.firewall_ports(["brick", "etcd"])["tcp"], [22, 2379, 2380, 7420, 20490])
        self.assertNotIn(20490, render.firewall_ports(["gateway"])["tcp"])

    def test_nftables_parses(self):
        with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
            f.write(render.nftables(render.firewall_ports(["all-in-one", "etcd"])))
            f.flush()
            p = subprocess.run(["nft", "-c", "-f", f.name], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)

    def test_etcd_env(self):
        aio = render.parse_env(render.etcd_env("n1", "127.0.0.1", [], "tok", loopback_only=True))
        self.assertEqual(aio["ETCD_LISTEN_CLIENT_URLS"], "http://127.0.0.1:2379")
        self.assertEqual(aio["ETCD_INITIAL_CLUSTER"], "n1=http://127.0.0.1:2380")
        three = render.parse_env(render.etcd_env(
            "e2", "10.0.0.2", [("e1", "10.0.0.1"), ("e2", "10.0.0.2"), ("e3", "10.0.0.3")], "tok"))
        self.assertEqual(three["ETCD_INITIAL_CLUSTER"],
                         "e1=http://10.0.0.1:2380,e2=http://10.0.0.2:2380,e3=http://10.0.0.3:2380")
        self.assertEqual(three["ETCD_ADVERTISE_CLIENT_URLS"], "http://10.0.0.2:2379")
        self.assertIn("http://127.0.0.1:2379", three["ETCD_LISTEN_CLIENT_URLS"])

    def test_etcd_env_all_in_one_serves_the_network(self):
        env = render.parse_env(render.etcd_env("n1", "192.168.78.11", [], "tok", loopback_only=True,
                                               tls_dir="/etc/cairn/etcd-server", serve_network=True))
        self.assertEqual(env["ETCD_LISTEN_CLIENT_URLS"], "https://0.0.0.0:2379")
        self.assertEqual(env["ETCD_ADVERTISE_CLIENT_URLS"], "https://192.168.78.11:2379")
        self.assertEqual(env["ETCD_LISTEN_PEER_URLS"], "https://127.0.0.1:2380")
        self.assertEqual(env["ETCD_INITIAL_CLUSTER"], "n1=https://127.0.0.1:2380")
        self.assertEqual(env["ETCD_CLIENT_CERT_AUTH"], "true")

    def test_etcd_server_ips(self):
        from cairn_appliance import firstboot
        self.assertEqual(firstboot.etcd_server_ips("192.168.78.11", ["10.0.2.15", "192.168.78.11", "127.0.0.1"]),
                         ["192.168.78.11", "10.0.2.15"])
        self.assertEqual(firstboot.etcd_server_ips(None, ["fe80::1", "nonsense"]), ["fe80::1"])
        self.assertEqual(firstboot.etcd_server_ips(None, []), [])

    def test_etcd_env_with_tls(self):
        env = render.parse_env(render.etcd_env("n1", "127.0.0.1", [], "tok", loopback_only=True,
                                               tls_dir="/etc/cairn/etcd-tls"))
        self.assertEqual(env["ETCD_LISTEN_CLIENT_URLS"], "https://127.0.0.1:2379")
        self.assertEqual(env["ETCD_CLIENT_CERT_AUTH"], "true")
        self.assertEqual(env["ETCD_PEER_CLIENT_CERT_AUTH"], "true")
        self.assertEqual(env["ETCD_TRUSTED_CA_FILE"], "/etc/cairn/etcd-tls/ca.pem")
        a = render.parse_env(render.appliance_env("brick", "n1", "auto", ["https://e:2379"],
                                                  etcd_tls=("/c/ca.pem", "/c/n1.pem", "/c/n1-key.pem")))
        self.assertEqual((a["CAIRN_ETCD_CA"], a["CAIRN_ETCD_CERT"], a["CAIRN_ETCD_KEY"]),
                         ("/c/ca.pem", "/c/n1.pem", "/c/n1-key.pem"))

    def test_appliance_env_round_trip(self):
        env = render.parse_env(render.appliance_env("brick", "n 1", "auto", ["http://a:2379", "http://b:2379"]))
        self.assertEqual(env, {"CAIRN_ROLE": "brick", "CAIRN_NODE": "n 1", "CAIRN_ADVERTISE": "auto",
                               "CAIRN_ETCD": "http://a:2379,http://b:2379"})

    def test_smb_conf_passes_testparm(self):
        d = tempfile.mkdtemp()
        try:
            text = render.smb_conf("cairn-appliance-1").replace("/etc/samba/cairn", d)
            with open(os.path.join(d, "shares.conf"), "w") as f:
                f.write("[vol0]\n    path = /\n")
            with open(os.path.join(d, "smb.conf"), "w") as f:
                f.write(text)
            p = subprocess.run(["testparm", "-s", os.path.join(d, "smb.conf")],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("[vol0]", p.stdout)
            self.assertIn("netbios name = CAIRN-APPLIANCE", p.stdout)
        finally:
            shutil.rmtree(d)

    def test_connect_text(self):
        s = {"nfs": True, "smb": True, "iscsi": True}
        motd = render.connect_text("all-in-one", "n1", ["10.0.2.15"], "vol0", s, "cairn", None)
        con = render.connect_text("all-in-one", "n1", ["10.0.2.15"], "vol0", s, "cairn", "Pw1")
        self.assertIn("10.0.2.15:/vol0", motd)
        self.assertIn("//10.0.2.15/vol0", motd)
        self.assertNotIn("Pw1", motd)
        self.assertIn("/root/cairn-credentials", motd)
        self.assertIn("password Pw1", con)


class EtcdTlsRunTest(unittest.TestCase):
    """The TLS settings etcd_env renders, run by a real etcd: two members on 127.0.0.2 and
    127.0.0.3 with peer TLS (client certificates both ways), certificates made by
    scripts/etcd-tls.sh. A client with a certificate of the CA is served; one without a
    certificate, or over plain HTTP, is not."""

    def test_two_members_with_client_and_peer_tls(self):
        import ssl
        import time
        import urllib.request
        d = tempfile.mkdtemp(prefix="etcd-tls-render.")
        procs, logs = [], []
        try:
            tls = os.path.join(d, "tls")
            script = os.path.join(HERE, "..", "..", "scripts", "etcd-tls.sh")
            subprocess.run(["bash", "-c", f'. "{script}" && etcd_tls_make "$1" 127.0.0.2 127.0.0.3',
                            "-", tls], check=True)
            members = [("e2", "127.0.0.2"), ("e3", "127.0.0.3")]
            for name, ip in members:
                env = render.parse_env(render.etcd_env(name, ip, members, "tok", tls_dir=tls))
                # the member's own address only (both share the host's 127.0.0.1)
                env["ETCD_LISTEN_CLIENT_URLS"] = env["ETCD_ADVERTISE_CLIENT_URLS"]
                env["ETCD_DATA_DIR"] = os.path.join(d, name)
                log = open(os.path.join(d, f"{name}.log"), "w")
                logs.append(log)
                procs.append(subprocess.Popen(["etcd"], env={**os.environ, **env}, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
            ctx.load_cert_chain(os.path.join(tls, "root.pem"), os.path.join(tls, "root-key.pem"))

            def health(url, context):
                try:
                    with urllib.request.urlopen(url + "/health", timeout=2, context=context) as r:
                        return json.load(r).get("health") == "true"
                except (OSError, ValueError):
                    return False
            deadline = time.time() + 60
            while not all(health(f"https://{ip}:2379", ctx) for _, ip in members):
                if time.time() > deadline:
                    logs = "".join(open(os.path.join(d, f"{n}.log")).read()[-2000:] for n, _ in members)
                    self.fail(f"a 2-member etcd with TLS did not become healthy:\n{logs}")
                time.sleep(0.5)
            nocert = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
            self.assertFalse(health("https://127.0.0.2:2379", nocert),
                             "etcd served a client without a certificate")
            self.assertFalse(health("http://127.0.0.2:2379", None), "etcd served plain HTTP")

            def peer_answers(context):
                try:
                    with urllib.request.urlopen("https://127.0.0.2:2380/version", timeout=2,
                                                context=context) as r:
                        return r.status == 200
                except OSError:
                    return False
            self.assertTrue(peer_answers(ctx), "the peer port did not answer a certificate of the CA")
            self.assertFalse(peer_answers(nocert), "the peer port served a client without a certificate")
        finally:
            for p in procs:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in logs:
                f.close()
            shutil.rmtree(d, ignore_errors=True)


class EtcdTlsFilesTest(unittest.TestCase):
    """`cairn-appliance etcd-tls` under a scratch root: the CA, etcd's files and a node's
    client identity, with their modes and owners; a second run changes nothing."""

    def test_ca_server_and_client_files(self):
        d = tempfile.mkdtemp(prefix="etcd-tls-files.")
        try:
            tool = os.path.join(HERE, "..", "..", "appliance", "bin", "cairn-appliance")
            env = {**os.environ, "CAIRN_APPLIANCE_ROOT": d}

            def run(*args):
                p = subprocess.run([tool, "etcd-tls", *args], capture_output=True, text=True, env=env)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                return json.loads(p.stdout)["changed"]
            for first in (True, False):
                self.assertEqual(run("ca", "--ip", "10.0.0.1"), first)
                self.assertEqual(run("client", "cairn-n2"), first)
                self.assertEqual(run("install-server"), first)
                self.assertEqual(run("install-client", "cairn-n2"), first)
            etc = os.path.join(d, "etc", "cairn")
            gid = __import__("grp").getgrnam("etcd").gr_gid
            want = {"etcd-ca": (0o700, 0), "etcd-ca/ca-key.pem": (0o600, 0),
                    "etcd-server": (0o750, gid), "etcd-server/server-key.pem": (0o640, gid),
                    "etcd-server/server.pem": (0o644, gid),
                    "etcd-client": (0o700, 0), "etcd-client/client-key.pem": (0o600, 0),
                    "etcd-client/client.pem": (0o644, 0)}
            for f, (mode, g) in want.items():
                st = os.stat(os.path.join(etc, f))
                self.assertEqual((oct(st.st_mode & 0o7777), st.st_uid, st.st_gid), (oct(mode), 0, g), f)
            out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName", "-in",
                                  os.path.join(etc, "etcd-server", "server.pem")],
                                 capture_output=True, text=True).stdout
            self.assertIn("IP Address:10.0.0.1", out)
            self.assertIn("IP Address:127.0.0.1", out)
            out = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in",
                                  os.path.join(etc, "etcd-client", "client.pem")],
                                 capture_output=True, text=True).stdout
            self.assertIn("CN = cairn-n2", out)
            p = subprocess.run([tool, "etcd-tls", "client", "bad/name"], capture_output=True, text=True, env=env)
            self.assertEqual(p.returncode, 1)
            self.assertIn("bad certificate name", json.loads(p.stdout)["msg"])
        finally:
            shutil.rmtree(d, ignore_errors=True)


class ReclockTlsTest(unittest.TestCase):
    """appliance/ha/ctdb-etcd-reclock against a real etcd with TLS and client-cert-auth, as
    the appliance and site.yml run it: with the node's certificate it takes the lock ('0'),
    a second helper sees contention ('1'); without a certificate, over plain HTTP, or with a
    certificate of another CA it answers '3' with the reason."""

    def test_reclock_over_tls(self):
        d = tempfile.mkdtemp(prefix="reclock-tls.")
        proc = log = holder = None
        try:
            tls = os.path.join(d, "tls")
            other = os.path.join(d, "other")
            script = os.path.join(HERE, "..", "..", "scripts", "etcd-tls.sh")
            for t in (tls, other):
                subprocess.run(["bash", "-c", f'. "{script}" && etcd_tls_make "$1"', "-", t], check=True)
            proc, log, url, port = _tls_etcd(self, d, tls)
            helper = os.path.join(HERE, "..", "..", "appliance", "ha", "ctdb-etcd-reclock")
            mine = ["--tls", os.path.join(tls, "ca.pem"), os.path.join(tls, "cairn.pem"),
                    os.path.join(tls, "cairn-key.pem")]
            key = "/cairn/ha/ctdb/reclock"
            holder = subprocess.Popen([helper, *mine, url, key, "3"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
            self.assertEqual(holder.stdout.read(1), b"0", "the helper with the node's certificate did not take the lock")

            def once(*args, env=None):
                p = subprocess.run([helper, *args], capture_output=True, text=True, timeout=30,
                                   env={**os.environ, **(env or {})})
                return p.stdout, p.stderr
            self.assertEqual(once(*mine, url, key, "3")[0], "1", "contention over TLS")
            # etcd's refusals: no client certificate, plain HTTP, another CA's certificate
            nocert = os.path.join(d, "no-cert.env")
            with open(nocert, "w") as f:
                f.write(f"CAIRN_ETCD_CA={tls}/ca.pem\n")
            out, err = once(url, key, "3", env={"CAIRN_APPLIANCE_ENV": nocert})
            self.assertEqual(out, "3", err)
            self.assertIn("--tls", err)
            out, err = once(*mine, f"http://127.0.0.1:{port}", key, "3")
            self.assertEqual(out, "3", "plain HTTP to a TLS etcd must fail: " + err)
            out, err = once("--tls", os.path.join(tls, "ca.pem"), os.path.join(other, "cairn.pem"),
                            os.path.join(other, "cairn-key.pem"), url, key, "3")
            self.assertEqual(out, "3", "a certificate of another CA must be refused: " + err)
            self.assertIn("cannot take lock", err)
            # the lock is released on SIGTERM: the next helper takes it
            holder.terminate()
            holder.wait(20)
            holder.stdout.close()
            holder.stderr.close()
            holder = subprocess.Popen([helper, *mine, url, key, "3"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)
            self.assertEqual(holder.stdout.read(1), b"0", "the lock was not released on SIGTERM")
            # and with the node's identity from appliance.env (no --tls), as on a node
            env_file = os.path.join(d, "appliance.env")
            with open(env_file, "w") as f:
                f.write(render.appliance_env("gateway", "g1", "auto", [url], etcd_tls=tuple(mine[1:])))
            self.assertEqual(once(url, key, "3", env={"CAIRN_APPLIANCE_ENV": env_file})[0], "1",
                             "the helper with appliance.env's certificate")
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


class EtcdMemberCertTest(unittest.TestCase):
    """A node that joins by user-data (cluster.join) asks its enrollment for an etcd server
    and peer certificate (appliance.env CAIRN_ETCD_MEMBER_*, which cairnd-start passes as
    --etcd-member-cert/--etcd-member-key), and first boot installs what cairnd stored for
    etcd (etcdtls.install_member: root:etcd, the key 0640), as on the CA node."""

    def test_appliance_env_asks_only_when_joining_over_tls(self):
        from cairn_appliance import etcdtls
        tls = etcdtls.CLIENT
        env = render.parse_env(render.appliance_env("brick", "n2", "auto", ["https://e:2379"], "e:7420",
                                                    "sha256:" + "ab" * 32, tls, etcdtls.MEMBER))
        self.assertEqual((env["CAIRN_ETCD_MEMBER_CERT"], env["CAIRN_ETCD_MEMBER_KEY"]), etcdtls.MEMBER)
        for args in [("brick", "n2", "auto", ["https://e:2379"], None, None, tls, etcdtls.MEMBER),
                     ("brick", "n2", "auto", ["http://e:2379"], "e:7420", "sha256:" + "ab" * 32, None,
                      etcdtls.MEMBER)]:
            self.assertNotIn("CAIRN_ETCD_MEMBER_CERT", render.parse_env(render.appliance_env(*args)))

    def test_install_member(self):
        import grp
        from cairn_appliance import etcdtls
        d = tempfile.mkdtemp(prefix="etcd-member.")
        saved = (etcdtls.MEMBER_DIR, etcdtls.CLIENT_DIR, etcdtls.SERVER_DIR)
        group = grp.getgrgid(os.getgid()).gr_name
        try:
            etcdtls.MEMBER_DIR, etcdtls.CLIENT_DIR, etcdtls.SERVER_DIR = (
                os.path.join(d, n) for n in ("member", "client", "server"))
            self.assertFalse(etcdtls.install_member(group), "installed without an enrollment's certificate")
            self.assertFalse(os.path.exists(etcdtls.SERVER_DIR))
            for sub, files in (("member", ("server.pem", "server-key.pem")), ("client", ("ca.pem",))):
                os.makedirs(os.path.join(d, sub), mode=0o700)
                for f in files:
                    with open(os.path.join(d, sub, f), "w", encoding="utf-8") as fh:
                        fh.write(f"{sub}/{f}\n")
            self.assertTrue(etcdtls.install_member(group))
            srv = etcdtls.SERVER_DIR
            for f, want, mode in (("ca.pem", "client/ca.pem", 0o644), ("server.pem", "member/server.pem", 0o644),
                                  ("server-key.pem", "member/server-key.pem", 0o640)):
                with open(os.path.join(srv, f), encoding="utf-8") as fh:
                    self.assertEqual(fh.read(), want + "\n", f)
                self.assertEqual(os.stat(os.path.join(srv, f)).st_mode & 0o777, mode, f)
            self.assertEqual(os.stat(srv).st_mode & 0o777, 0o750)
        finally:
            etcdtls.MEMBER_DIR, etcdtls.CLIENT_DIR, etcdtls.SERVER_DIR = saved
            shutil.rmtree(d, ignore_errors=True)


class EtcdAuthTest(unittest.TestCase):
    """cairn-appliance etcd-tls auth (etcdtls.enable_auth, what first boot and site.yml run)
    against a real etcd with TLS: auth is on; cairnd's user cairn and a node's cairn-NODE
    may use /cairn only; the lock helper's cairn-reclock certificate takes the CTDB lock and
    nothing else; a certificate of the etcd CA whose CN is no user gets nothing. Running it
    again changes nothing."""

    def test_auth_on_users_by_cn(self):
        from cairn_appliance import etcdtls
        d = tempfile.mkdtemp(prefix="etcd-auth.")
        proc = log = None
        saved = etcdtls.CA_DIR
        try:
            tls = etcdtls.CA_DIR = os.path.join(d, "ca")
            self.assertTrue(etcdtls.make_ca())
            etcdtls.issue_client("cairn-g1")
            etcdtls.issue_client("nobody")
            proc, log, url, _ = _tls_etcd(self, d, tls)

            def ctl(cn, *args):
                return subprocess.run(
                    ["etcdctl", "--endpoints", url, "--cacert", f"{tls}/ca.pem", "--cert", f"{tls}/{cn}.pem",
                     "--key", f"{tls}/{cn}-key.pem", "--dial-timeout", "3s", "--command-timeout", "5s", *args],
                    capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
            # before: any certificate of the etcd CA reads and writes everything
            self.assertEqual(ctl("nobody", "put", "/elsewhere", "x").returncode, 0)
            self.assertTrue(etcdtls.enable_auth(url, ["cairn-g1"]))
            self.assertTrue(etcdtls.enable_auth(url, ["cairn-g1"]), "not idempotent")
            for cn in ("cairn", "cairn-g1"):
                r = ctl(cn, "put", "/cairn/peers/x", "y")
                self.assertEqual(r.returncode, 0, f"{cn} cannot write under /cairn: {r.stderr}")
                self.assertNotEqual(ctl(cn, "get", "/elsewhere").returncode, 0, f"{cn} reads outside /cairn")
            # a node's own role: its liveness key, not another node's
            self.assertEqual(ctl("cairn-g1", "put", "/cairn/live/g1", "a").returncode, 0)
            r = ctl("cairn-g1", "put", "/cairn/live/n1", "a")
            self.assertIn("permission denied", r.stderr, "cairn-g1 wrote another node's liveness key")
            r = ctl("nobody", "get", "/cairn/peers/x")
            self.assertNotEqual(r.returncode, 0, "a certificate whose CN is no etcd user got in")
            self.assertIn("permission denied", r.stderr + r.stdout)
            self.assertNotEqual(ctl(etcdtls.RECLOCK_USER, "get", "/cairn/peers/x").returncode, 0,
                                "the lock helper's certificate reads the cluster's keys")
            helper = os.path.join(HERE, "..", "..", "appliance", "ha", "ctdb-etcd-reclock")
            mine = ["--tls", f"{tls}/ca.pem", f"{tls}/{etcdtls.RECLOCK_USER}.pem",
                    f"{tls}/{etcdtls.RECLOCK_USER}-key.pem"]
            holder = subprocess.Popen([helper, *mine, url, etcdtls.RECLOCK_KEY, "3"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                self.assertEqual(holder.stdout.read(1), b"0", "the lock helper as cairn-reclock")
            finally:
                holder.terminate()
                holder.wait(20)
                holder.stdout.close()
                holder.stderr.close()
        finally:
            etcdtls.CA_DIR = saved
            if proc and proc.poll() is None:
                proc.kill()
                proc.wait()
            if log:
                log.close()
            shutil.rmtree(d, ignore_errors=True)


def _tls_etcd(test, d, tls):
    """etcd with TLS and client-cert-auth as the appliance runs it (render.etcd_env), its CA
    and certificates in TLS (scripts/etcd-tls.sh); waits until it is healthy. Returns
    (process, log file, client URL, client port)."""
    import ssl
    import time
    import urllib.request
    port = _free_port()
    env = render.parse_env(render.etcd_env("r1", "127.0.0.1", [], "tok", loopback_only=True,
                                           tls_dir=tls))
    url = f"https://127.0.0.1:{port}"
    env.update(ETCD_LISTEN_CLIENT_URLS=url, ETCD_ADVERTISE_CLIENT_URLS=url,
               ETCD_LISTEN_PEER_URLS=f"https://127.0.0.1:{_free_port()}",
               ETCD_DATA_DIR=os.path.join(d, "data"))
    env["ETCD_INITIAL_ADVERTISE_PEER_URLS"] = env["ETCD_LISTEN_PEER_URLS"]
    env["ETCD_INITIAL_CLUSTER"] = "r1=" + env["ETCD_LISTEN_PEER_URLS"]
    log = open(os.path.join(d, "etcd.log"), "w")
    proc = subprocess.Popen(["etcd"], env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.pem"))
    ctx.load_cert_chain(os.path.join(tls, "cairn.pem"), os.path.join(tls, "cairn-key.pem"))
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2, context=ctx) as r:
                if json.load(r).get("health") == "true":
                    break
        except (OSError, ValueError):
            pass
        if time.time() > deadline:
            proc.kill()
            proc.wait()
            log.close()
            test.fail("etcd with TLS did not start: " + open(os.path.join(d, "etcd.log")).read()[-2000:])
        time.sleep(0.3)
    return proc, log, url, port


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WaitCairndTest(unittest.TestCase):
    """A node that joined by token has no CLI credential: first boot waits for its node
    certificate and cairnd's port instead of `cairn pool list`, which could not succeed."""

    def setUp(self):
        from cairn_appliance import ensure, firstboot, paths
        self.fb, self.ensure, self.paths = firstboot, ensure, paths
        self.d = tempfile.mkdtemp()
        self.saved = (firstboot.NODE_PEM, ensure.cli_credential, paths.CAIRND_PORT)
        firstboot.NODE_PEM = os.path.join(self.d, "node.pem")
        ensure.cli_credential = lambda: None
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        paths.CAIRND_PORT = self.listener.getsockname()[1]

    def tearDown(self):
        self.fb.NODE_PEM, self.ensure.cli_credential, self.paths.CAIRND_PORT = self.saved
        self.listener.close()
        shutil.rmtree(self.d)

    def test_without_node_certificate_it_says_so(self):
        with self.assertRaises(self.fb.StepError) as cm:
            self.fb.wait_cairnd(timeout=2)
        self.assertIn("no node certificate", str(cm.exception))

    def test_member_without_cli_credential_is_up_when_its_port_answers(self):
        with open(self.fb.NODE_PEM, "w") as f:
            f.write("cert\n")
        self.fb.wait_cairnd(timeout=5)  # no `cairn` run: it would fail without a credential


class WaitMountedTest(unittest.TestCase):
    def test_waits_for_the_mount_to_answer(self):
        # appliance-join under load: the mount answered ESTALEMAP (brick healing after a
        # lost lease) at first, then answered; first boot checked once and failed
        from cairn_appliance import firstboot
        calls = []

        def answers():
            calls.append(1)
            return len(calls) >= 3
        self.assertTrue(firstboot.wait_mounted("/srv/cairn/mnt/vol0", timeout=30, answers=answers))
        self.assertEqual(len(calls), 3)
        self.assertFalse(firstboot.wait_mounted("/srv/cairn/mnt/vol0", timeout=0, answers=lambda: False))


if __name__ == "__main__":
    unittest.main()
