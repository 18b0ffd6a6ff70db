#!/usr/bin/env python3
"""The addresses first boot shows (console, /etc/motd, `cairn-appliance status`): the
node's cairn.address first, before the default route's. Behind NAT (qemu's user network,
a cloud's private address) the default route's address is not the one other nodes and
clients reach: a node on a private link (tests/vm/scenarios/appliance-join.sh) printed
its NFS, SMB and iSCSI portal address as qemu's 10.0.2.15.
Run: python3 -m unittest tests/appliance/test_firstboot_addresses.py
"""

import json
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "appliance", "lib"))

from cairn_appliance import firstboot, render  # noqa: E402

ROUTE = json.dumps([{"dst": "192.0.2.1", "gateway": "10.0.2.2", "dev": "ens3",
                     "prefsrc": "10.0.2.15"}])
ADDRS = json.dumps([
    {"ifname": "ens3", "addr_info": [{"local": "10.0.2.15", "prefixlen": 24}]},
    {"ifname": "ens4", "addr_info": [{"local": "192.168.78.11", "prefixlen": 24}]},
])


def fake_run(cmd, what, timeout=300, **kw):
    return ROUTE if "route" in cmd else ADDRS


class AddressesTest(unittest.TestCase):
    def addresses(self, advertise):
        with mock.patch.object(firstboot, "run", fake_run):
            return firstboot.primary_addresses(advertise)

    def test_default_route_first_without_an_advertised_address(self):
        for adv in (None, "", "auto"):
            self.assertEqual(self.addresses(adv), ["10.0.2.15", "192.168.78.11"], adv)

    def test_advertised_address_first(self):
        self.assertEqual(self.addresses("192.168.78.11"), ["192.168.78.11", "10.0.2.15"])

    def test_connect_text_names_the_advertised_address(self):
        s = {"nfs": True, "smb": True, "iscsi": True}
        text = render.connect_text("all-in-one", "node-a", self.addresses("192.168.78.11"),
                                   "vol0", s, "cairn", None)
        self.assertIn("portal 192.168.78.11:3260", text)
        self.assertIn("192.168.78.11:/vol0", text)
        self.assertIn("//192.168.78.11/vol0", text)
        self.assertNotIn("10.0.2.15:", text)
        self.assertNotIn("//10.0.2.15", text)


if __name__ == "__main__":
    unittest.main()
