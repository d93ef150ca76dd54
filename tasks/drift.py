"""Drift: the converge got through on this host, so what it found changed by hand is repaired (``sglfleet_drift`` back to 0)."""

from pyinfra.api import deploy

from sglfleet.operations import drift


@deploy("Drift")
def drift_repaired(plan, found):
    """
    + plan: the host's plan (``sglfleet.plan.fleet_plan.HostPlan``)
    + found: its read (``sglfleet.controller.reads.read_host``)
    """
    # Last, after every step that finds and repairs drift; a host that failed on
    # the way never gets here, and its sglfleet.prom keeps the drift it was found with.
    drift.cleared(name="No drift left in sglfleet.prom",
                  recorded=found.release.drifted if found.release is not None else None,
                  textfile_dir=plan.config.textfile_dir)
