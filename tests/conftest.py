"""Shared fixtures. ``fleet``: the local fleet, booted once per session."""

import pytest

from sglfleet.devfleet import DevFleetError, Fleet


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
