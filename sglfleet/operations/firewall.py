"""
The host's nftables policy, ``table inet sglfleet``: applied, confirmed, or removed.

The operation decides from what the read found (``sglfleet.facts.firewall``) and yields
the policy's file and the controller's step that applies and confirms it
(``sglfleet.controller.firewall``). A table changed or removed by hand is drift: said,
marked in ``sglfleet.prom``, and put back.

**Example:**

.. code:: python

    enforced(name="Firewall policy", policy=plan.policy, found=found.firewall, rules=found.firewall_rules,
             confirm_s=30)
"""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from sglfleet.controller.firewall import applied_and_confirmed
from sglfleet.controller.outcomes import fail
from sglfleet.facts.firewall import NO_NFT, FirewallHostState
from sglfleet.host.layout import LAYOUT
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.drift import found as found_drift, marked
from sglfleet.operations.output import say, show_diff, wants_diff
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.firewall import NFT_MISSING, remove_command
from sglfleet.plan.network import Policy


@operation()
def enforced(policy: Policy | None, found: FirewallHostState, rules: str | bytes | None = None, confirm_s: int = 30,
             textfile_dir: str = TEXTFILE_DIR):
    """
    Make ``policy`` the host's firewall, confirmed over a new SSH connection, unless it is in force;
    with no policy (``firewall = false``), remove what sglfleet put there.

    + policy: the host's planned policy (``HostPlan.policy``), or None
    + found: the read's ``FirewallState``
    + rules: the read's confirmed policy file: its digest where it is the planned one, else its bytes
    + confirm_s: the host undoes a policy not confirmed within this
    + textfile_dir: node_exporter's textfile folder, where a drift found is marked (``sglfleet_drift``)
    """
    if policy is None:
        if found.digest is None and not found.unit and not found.pending:
            host.noop("no sglfleet firewall policy (firewall = false)")
            return
        say("Will remove table inet sglfleet and its boot unit: firewall = false", logger.warning)
        yield remove_command()
        return
    if found.live == NO_NFT:
        yield FunctionCommand(fail, (f"firewall policy {policy.digest[:12]}: {NFT_MISSING}",), {})
        return
    if found.in_force and found.digest == policy.digest and found.unit:
        host.noop(f"firewall policy {policy.digest[:12]} in force")
        return
    drift = None
    if found.drifted and found.digest == policy.digest:
        drift = found_drift("firewall", "table inet sglfleet",
                            ["removed" if found.live == "absent" else "changed since it was confirmed"],
                            "will put the policy back, confirmed over a new SSH connection")
    what = "new" if found.digest is None else "drifted" if drift else "changed" if found.digest != policy.digest \
        else "not confirmed"
    say(f"Will apply firewall policy {policy.digest[:12]} ({what}); the host undoes it by itself unless "
        f"the controller confirms it over a new SSH connection within {confirm_s} s")
    if wants_diff() and found.digest != policy.digest:
        old = rules.decode(errors="replace") if isinstance(rules, bytes) else ""
        show_diff(f"Will update {LAYOUT.firewall_rules}", old, policy.text)
    if drift:
        yield drift
        yield marked("firewall", textfile_dir)
    pending = LAYOUT.firewall_pending
    yield f"mkdir -p {shlex.quote(LAYOUT.etc)}"
    yield FileUploadCommand(StringIO(policy.text), pending)
    yield f"chmod 600 {shlex.quote(pending)}"
    yield HostFunctionCommand(applied_and_confirmed, (policy.digest, confirm_s), {})
