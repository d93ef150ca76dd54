"""A PD batch's settle (``sglfleet.controller.pd``): two operations, so the old release leaves the gateways
on every gateway before the first batch's units join them; and a batch of groups' drain and stop before it
switches, and its settle's three (a failed group leaves, stops whole, goes back)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.rollout_steps import BatchStep, SettleTurn
from sglfleet.controller.pd import drained, flipped, halted, settled, stopped


@operation(is_idempotent=False)
def unit_settled(step: BatchStep, turn: SettleTurn, switching: bool, undo: bool = False):
    """
    Roll the host back where its unit failed; in the first batch, take the old release out of the gateways.
    A group's member, where its group failed: leave the gateways, to stop whole in the next turn.

    + step: the host's step in its batch
    + turn: its part in the batch's settle
    + switching: this run switches a host of the batch (else nothing to settle: no command)
    + undo: a rollout's settle: a host that goes back undoes this run's switch (previous as before it)

    **Example:**

    .. code:: python

        unit_settled(name="canary batch 1: settle", step=step, turn=turn, switching=True, undo=True)
    """
    if switching:
        yield HostFunctionCommand(settled, (step, turn), {"undo": undo})


@operation(is_idempotent=False)
def unit_halted(step: BatchStep, turn: SettleTurn, switching: bool):
    """
    Stop a failed group's member once its head left the gateways in the settle, before any member goes back.

    + step: the host's step in its batch
    + turn: its part in the batch's settle
    + switching: this run switches a host of the batch (else nothing to stop: no command)

    **Example:**

    .. code:: python

        unit_halted(name="canary batch 1 settle: a failed group stops whole", step=step, turn=turn, switching=True)
    """
    if switching and step.together:
        yield HostFunctionCommand(halted, (step, turn), {})


@operation(is_idempotent=False)
def unit_flipped(step: BatchStep, turn: SettleTurn, switching: bool, undo: bool = False):
    """
    Join the gateways at the flip, where the host's unit of the first batch passed; a group's member, go
    back with its group where it failed (every member stopped in the turn before).

    + step: the host's step in its batch
    + turn: its part in the batch's settle
    + switching: this run switches a host of the batch (else nothing to flip: no command)
    + undo: a rollout's settle: a group that goes back undoes this run's switch (previous as before it)
    """
    if switching and (turn.flip or step.together):
        yield HostFunctionCommand(flipped, (step, turn), {"undo": undo})


@operation(is_idempotent=False)
def unit_drained(step: BatchStep, switching: bool):
    """
    Leave the gateways before a batch of groups switches: a rank that stops takes its group down.

    + step: the host's step in its batch (a rank above 0 has no gateways: nothing to leave)
    + switching: this run switches a host of the batch (else no command: nothing stops)

    **Example:**

    .. code:: python

        unit_drained(name="canary batch 1: its batch leaves the gateways", step=step, switching=True)
    """
    if switching:
        yield HostFunctionCommand(drained, (step,), {})


@operation(is_idempotent=False)
def unit_stopped(step: BatchStep, switching: bool):
    """
    Stop the host's service once its batch of groups left the gateways, before any host of it starts.

    + step: the host's step in its batch
    + switching: this run switches a host of the batch (else no command: nothing stops)

    **Example:**

    .. code:: python

        unit_stopped(name="canary batch 1 stop: its batch stops before any host starts", step=step, switching=True)
    """
    if switching:
        yield HostFunctionCommand(stopped, (step,), {})


@operation()
def not_in_step(label: str):
    """
    Nothing: the host is not in this step of a PD rollout. Every serving host has an operation at every
    step, so that pyinfra runs each step only after the one before on every host (a later batch's
    switch never before an earlier batch's flip).

    + label: the step's batch, for the message
    """
    host.noop(f"{label}: not in it")
    yield from ()
