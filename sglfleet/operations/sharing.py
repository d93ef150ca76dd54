"""The end of a host's file server for its peers (``sglfleet.artifacts.fanout.serve``)."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import operation


@operation()
def serving_stopped(unit: str | None, what: str = "files"):
    """
    Stop this host's file server for its peers, once no peer fetches from it any more;
    nothing, and no remote command, on a host that can have started none.

    + unit: the file server's unit, where the host may have started one; None where it cannot have
    + what: what it serves, for the message

    **Example:**

    .. code:: python

        serving_stopped(name="Model files no longer served to peers", unit="sglfleet-models-share-3f2a9c1d",
                        what="model files")
    """
    if not unit:
        host.noop(f"serves no {what} to peers")
        return
    yield f"systemctl stop {shlex.quote(unit)} 2>/dev/null || true"
