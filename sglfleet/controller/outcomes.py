"""
A host's outcome, kept in the run's record as the run executes: failed (said in red, the
summary's reason, ``HostFailed``), passed, or a service retired. Each is called as pyinfra
calls a ``FunctionCommand``, with the run's ``state`` and the host first.

**Example:**

.. code:: python

    yield FunctionCommand(fail, ("cannot patch ...: no class KimiK25ForConditionalGeneration",), {})
"""

from __future__ import annotations

from pyinfra import logger

from sglfleet.record import summary
from sglfleet.record.events import emit
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.record.run import record


def fail(state, host, message: str) -> bool:
    """
    Fail ``host`` for ``message``: log it as the host's error, keep it as the summary's reason
    (the first counts; later lines explain it) and record ``HostFailed`` (once a host). False,
    which fails the host from a ``FunctionCommand``.

    + state, host: as pyinfra calls a ``FunctionCommand``: the run's state, and the host
    + message: why; its first line is the summary's reason
    """
    run = record(state)
    host.log_styled(message, fg="red", log_func=logger.error)
    if host.name not in run.failed:
        emit(run, "HostFailed", host=host.name, message=message)
    summary.failed(run, host.name, message)
    return False


def passed(state, host, outcome: str, reason: str, message: str) -> bool:
    """
    Keep what ``host`` serves now for the summary, and record the event ``reason``.

    + outcome: e.g. ``"gateway serves configuration 3f2a9c1d"``
    + reason, message: the event, e.g. ``"GatewayRestarted"``
    """
    run = record(state)
    summary.passed(run, host.name, outcome)
    emit(run, reason, host=host.name, message=message)
    return True


def retired(state, host, services: list[str], why: str) -> bool:
    """
    A ``ServiceRetired`` event for each of ``services`` the host no longer runs.

    + services: their names (``gateway``: the host's gateway)
    + why: e.g. ``"the host is in group gateways"``
    """
    run = record(state)
    for name in services:
        unit = GATEWAY.unit if name == "gateway" else LAYOUT.for_service(name).unit
        emit(run, "ServiceRetired", host=host.name, service=name, message=f"{unit} stopped and removed ({why})")
    return True
