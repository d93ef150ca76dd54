"""Shared fixtures. ``fleet``: the local fleet, booted once per session (once per worker under xdist)."""

import os

import gevent.monkey
import pytest

from sglfleet import PROJECT_ROOT

# pyinfra_cli patches its whole process for gevent when imported (monkey.patch_all()).
# The tests import its inventory helpers in-process and need none of it, and under
# pytest-xdist a patched worker deadlocks on its own queue: the test process stays
# unpatched. Every deploy the tests run is a pyinfra process of its own, patched as ever.
gevent.monkey.patch_all = lambda *args, **kwargs: None

# Under pytest-xdist each worker has a local fleet of its own: its own state folder,
# bridge, subnet and machine-name prefix, set before sglfleet.devfleet reads them, and
# in the environment every pyinfra and sglfleet process the tests start inherits.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...
if _WORKER:
    _number = int(_WORKER.removeprefix("gw"))
    os.environ["SGLFLEET_FLEET_DIR"] = str(PROJECT_ROOT / f".fleet-{_WORKER}")
    os.environ["SGLFLEET_DEVFLEET_BRIDGE"] = f"sglfleetw{_number}"
    os.environ["SGLFLEET_DEVFLEET_SUBNET"] = f"10.213.{60 + _number}.0/24"
    os.environ["SGLFLEET_DEVFLEET_PREFIX"] = f"w{_number}-"

from sglfleet.devfleet import DevFleetError, Fleet  # noqa: E402  (reads the variables above)


@pytest.fixture(scope="session")
def fleet():
    """
    The local fleet (``sglfleet.devfleet.Fleet``) for tests marked ``fleet``.

    A fleet already up (``sglfleet devfleet up``) is reused, repaired if a host
    died, and left running. Otherwise 3 hosts are booted for the session and
    always torn down at its end, whether tests pass, fail or are interrupted.
    """
    fleet = Fleet(log=lambda line: None)
    owned = not fleet.hosts
    try:
        fleet.up(len(fleet.hosts) or 3)
    except DevFleetError as error:
        if owned:
            fleet.down()
        pytest.fail(f"local fleet unavailable: {error}", pytrace=False)
    except BaseException:  # interrupted while booting
        if owned:
            fleet.down()
        raise
    try:
        yield fleet
    finally:
        if owned:
            fleet.down()


def pytest_collection_modifyitems(items):
    """
    Modules that converge the local fleet first, the most fleet tests first; the quick ones last.

    ``make test``'s workers each take a module at a time, in this order: the long modules start
    early and the short ones fill the end, so the workers finish together. Each module's tests
    stay together and in order; every module holds on its own whichever module ran before it.
    """
    fleet_tests: dict = {}
    for item in items:
        fleet_tests[item.module] = fleet_tests.get(item.module, 0) + ("fleet" in item.fixturenames)
    order = {module: index for index, module in enumerate(fleet_tests)}
    items.sort(key=lambda item: (-fleet_tests[item.module], order[item.module]))
