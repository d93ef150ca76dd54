"""Drift: the converge got through on this host, so what it found changed by hand is repaired (``sglfleet_drift`` back to 0)."""

from pyinfra import host
from pyinfra.api import deploy

from sglfleet.operations import drift
from sglfleet.run.context import host_config, host_state


@deploy("Drift")
def drift_repaired():
    # Last, after every step that finds and repairs drift; a host that failed on
    # the way never gets here, and its sglfleet.prom keeps the drift it was found with.
    found = host_state(host)
    drift.cleared(name="No drift left in sglfleet.prom",
                  recorded=found.release.drifted if found.release is not None else None,
                  textfile_dir=host_config(host).textfile_dir)
