"""
What a run shares across its whole fleet (``FleetConfig``): how it rolls out, where its events go,
whom it notifies. Every host must agree on each key; ``config.py``'s check finds a host that does
not before anything connects. Pure.

**Example:**

.. code:: python

    fleet = FleetConfig.agreed(validate_inventory(inventory))
    fleet.events_file   # "~/sglfleet-events.jsonl", or None
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sglfleet.errors import ConfigError
from sglfleet.plan.settings import HostConfig, NotifyWebhook
from sglfleet.plan.waves import FLEET_SETTINGS, fleet_setting

# The keys one run reads once for all its hosts: the rollout's, then the event log's.
FLEET_KEYS = (*FLEET_SETTINGS, "events_file", "notify_webhooks")


@dataclass(frozen=True)
class FleetConfig:
    """
    The fleet-wide keys, as every host of the inventory gives them.

    + rollout_waves: the waves' group names in order, or None for the default order
    + rollout_serial: the batch sizes, or None (each wave whole)
    + max_fail_percentage: a batch with more failed hosts (in %) stops the run
    + rollout_until: the last wave this run starts, or None
    + events_file: the controller's event log, or None for the default path
    + notify_webhooks: the webhooks the events go to
    """

    rollout_waves: tuple[str, ...] | None = None
    rollout_serial: tuple[int | str, ...] | None = None
    max_fail_percentage: float = 0.0
    rollout_until: str | None = None
    events_file: str | None = None
    notify_webhooks: tuple[NotifyWebhook, ...] = ()

    @classmethod
    def agreed(cls, configs: Mapping[str, HostConfig]) -> "FleetConfig":
        """
        The keys every host agrees on; else a ``ConfigError`` with one line for each host that differs.

        + configs: validated ``HostConfig`` by host name, every host of the inventory
        """
        values, problems = {}, []
        for key in FLEET_KEYS:
            try:
                value = fleet_setting(configs, key)
            except ConfigError as error:
                problems += error.problems
                continue
            if value is not None:
                values[key] = tuple(value) if isinstance(value, list) else value
        if problems:
            raise ConfigError(problems)
        return cls(**values)
