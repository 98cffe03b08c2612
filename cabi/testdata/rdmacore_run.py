# Runs rdma-core's own test suite (the directory this file is copied into, as package
# tests) as its run_tests.py does, with one change: a test looks for its device's IP
# address in /sys/class/infiniband/DEV/device/net/ and `ip addr`, where pibgw's IPoIB
# interfaces are not (they live in the fabric's userspace netstack), so
# PIBGW_SUITE_ADDRS ("pib_0=10.10.0.1,...") gives each device's address instead.
# Used by TestRdmaCoreSuite (rdmacore_test.go).
import os
import unittest
from importlib.machinery import SourceFileLoader

from args_parser import parser

here = os.path.dirname(os.path.abspath(__file__))
tests = SourceFileLoader('tests', os.path.join(here, '__init__.py')).load_module()
import tests.base  # noqa: E402 (loaded by the line above)

addrs = dict(a.split('=', 1) for a in os.environ.get('PIBGW_SUITE_ADDRS', '').split(',') if a)


def _get_ip_mac(self, dev, port, idx):
    # base.RDMATestCase._get_ip_mac's entry: device, port, GID index, IP address, MAC
    # (the MAC is for Ethernet's raw packet tests only).
    self.args.append([dev, port, idx, addrs.get(dev), None])


if addrs:
    tests.base.RDMATestCase._get_ip_mac = _get_ip_mac
parser.parse_args()
unittest.main(module=tests)
