"""The suite's guard against reaching the network (tests/offline.py), checked without any traffic."""

import socket

from tests.offline import installed, outside_this_machine


def test_loopback_is_allowed_and_anything_else_is_refused():
    assert not outside_this_machine(socket.AF_INET, ("127.0.0.1", 8080))
    assert not outside_this_machine(socket.AF_INET6, ("::1", 8080, 0, 0))
    assert not outside_this_machine(socket.AF_INET, ("localhost", 8080))
    assert not outside_this_machine(socket.AF_UNIX, "/tmp/some.sock")
    assert outside_this_machine(socket.AF_INET, ("93.184.216.34", 443))
    assert outside_this_machine(socket.AF_INET, ("api.openai.com", 443))


def test_the_guard_is_installed_for_the_whole_suite():
    assert installed()
