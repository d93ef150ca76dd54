"""The host's nftables policy as sglfleet left it, and sglfleet's table as it is now."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from pyinfra.api import FactBase

from sglfleet.host.layout import FIREWALL_UNIT, LAYOUT

TABLE = "inet sglfleet"
NO_NFT = "no-nft"
ABSENT = "absent"


@dataclass(frozen=True)
class FirewallHostState:
    """
    + live: the sha256 of ``nft -s list table inet sglfleet`` now; ``"absent"`` (no such table) or
      ``"no-nft"`` (nft is not installed)
    + digest: the confirmed policy's digest, or None (sglfleet never confirmed one here)
    + listed: the table's digest as nft listed it when the policy was confirmed, or None
    + unit: whether the boot unit is installed
    + pending: whether a policy is applied and not confirmed (the host undoes it by itself)
    """

    live: str = ABSENT
    digest: str | None = None
    listed: str | None = None
    unit: bool = False
    pending: bool = False

    @property
    def in_force(self) -> bool:
        """The confirmed policy is the table in force, unchanged."""
        return self.digest is not None and self.live == self.listed and not self.pending

    @property
    def drifted(self) -> bool:
        """A confirmed policy whose table was changed or removed by hand since."""
        return self.digest is not None and self.live != self.listed and not self.pending


class FirewallState(FactBase[FirewallHostState]):
    """
    Returns a ``FirewallHostState``: what sglfleet confirmed, and the table now.

    **Example:**

    .. code:: python

        host.get_fact(FirewallState).in_force   # True
    """

    @staticmethod
    def default() -> FirewallHostState:
        return FirewallHostState()

    def command(self) -> str:
        q = shlex.quote
        # $(...) drops the listing's last newline and printf puts one back: the digest the confirm wrote.
        return (f"if command -v nft >/dev/null 2>&1; then l=$(nft -s list table {TABLE} 2>/dev/null) "
                f"&& echo \"live $(printf '%s\\n' \"$l\" | sha256sum | cut -c1-64)\" || echo 'live {ABSENT}'; "
                f"else echo 'live {NO_NFT}'; fi; "
                f"if [ -f {q(LAYOUT.firewall_state)} ]; then sed 's/^/state /' {q(LAYOUT.firewall_state)}; fi; "
                f"if [ -f /etc/systemd/system/{FIREWALL_UNIT} ]; then echo unit; fi; "
                f"if [ -f {q(LAYOUT.firewall_pending)} ]; then echo pending; fi")

    def process(self, output) -> FirewallHostState:
        live, state, unit, pending = ABSENT, [], False, False
        for line in output:
            word, _, rest = line.partition(" ")
            if word == "live":
                live = rest
            elif word == "state":
                state.append(rest)
            unit = unit or word == "unit"
            pending = pending or word == "pending"
        digest, listed = (state + [None, None])[:2]
        return FirewallHostState(live=live, digest=digest, listed=listed, unit=unit, pending=pending)
