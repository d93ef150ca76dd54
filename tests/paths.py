"""
Where sglfleet keeps things on a host and what its units are called, for the tests.

The values are the layout's own (``sglfleet/host/layout.py``), never spelled out, so a
test says which path it means and a change of layout is one change:

    from paths import LAYOUT, UNIT, service

    fleet.inside(host, f"systemctl show {UNIT} -p MainPID")    # the host's one service
    fleet.inside(host, f"cat {LAYOUT.current}/launch")
    service("a").unit, service("a").env_file                   # a named service's

The paths today's hosts already have are spelled out once, in the tests of the layout
(``test_services.py``), where spelling them is the point.
"""

import posixpath

from sglfleet.host.layout import GATEWAY, LAYOUT, Layout

__all__ = ["GATEWAY", "LAYOUT", "SYSTEMD", "UNIT", "Layout", "service"]

# The host's one service's unit.
UNIT = LAYOUT.unit
# The folder of sglfleet's unit files.
SYSTEMD = posixpath.dirname(LAYOUT.unit_file)


def service(name: str) -> Layout:
    """The layout of the host's service ``name`` (``"sglang"``: the host's one service)."""
    return LAYOUT.for_service(name)
