"""
The commands that apply, confirm, undo and remove a host's nftables policy. Pure.

A new policy is applied with its own undoing already scheduled (the idea of
``iptables-apply`` and of a router's "commit confirmed"): ``apply`` checks it with
``nft -c``, keeps the table in force, starts a systemd timer that puts that table
back in ``confirm_s`` seconds, and applies the new one in one transaction. Only
``confirm``, sent over a new SSH connection, stops the timer: a policy that cuts
the controller off undoes itself. ``sglfleet-firewall.service`` applies the
confirmed policy at boot.

**Example:**

.. code:: python

    yield apply_command(30)      # after the policy was written to LAYOUT.firewall_pending
    confirm_command(digest)      # over a new connection
"""

from __future__ import annotations

import shlex

from sglfleet.host.layout import FIREWALL_REVERT, FIREWALL_UNIT, LAYOUT

TABLE = "inet sglfleet"
UNIT_FILE = f"/etc/systemd/system/{FIREWALL_UNIT}"
# Before the network comes up at boot, so no port is open in between.
UNIT = f"""[Unit]
Description=sglfleet's nftables policy (table {TABLE}), as the last converge confirmed it
DefaultDependencies=no
Before=network-pre.target shutdown.target
Wants=network-pre.target
Conflicts=shutdown.target
ConditionPathExists={LAYOUT.firewall_rules}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f {LAYOUT.firewall_rules}

[Install]
WantedBy=sysinit.target
"""
NFT_MISSING = "nft is not installed: install nftables (Debian's and Ubuntu's package), or set firewall = false"


def _revert() -> str:
    """Put back the table kept by ``apply`` (none: the table goes), unless the policy was confirmed."""
    pending, previous = shlex.quote(LAYOUT.firewall_pending), shlex.quote(LAYOUT.firewall_previous)
    return (f"if [ -f {pending} ]; then nft -f {previous} && rm -f {pending} {previous} && "
            f"echo 'sglfleet: a firewall policy not confirmed in time was undone' >&2; fi")


def apply_command(confirm_s: int) -> str:
    """
    Check the pending policy, keep the table in force, schedule its return in ``confirm_s`` seconds,
    apply the pending one. Exits 2 with nft's words when the policy does not parse (nothing changed).

    + confirm_s: how long the host waits for ``confirm`` before it undoes the policy
    """
    q = shlex.quote
    pending, previous = q(LAYOUT.firewall_pending), q(LAYOUT.firewall_previous)
    revert = q(_revert())
    return (f"command -v nft >/dev/null 2>&1 || {{ echo {q(NFT_MISSING)} >&2; exit 2; }}; "
            f"nft -c -f {pending} || exit 2; "
            # What serves now, as one transaction that replaces the table (or removes it, where there is none).
            f"{{ echo 'table {TABLE}'; echo 'delete table {TABLE}'; nft -s list table {TABLE} 2>/dev/null || true; }} "
            f"> {previous}.tmp && mv -f {previous}.tmp {previous} && "
            f"{{ systemctl stop {FIREWALL_REVERT}.timer 2>/dev/null; "
            f"systemctl reset-failed {FIREWALL_REVERT}.timer {FIREWALL_REVERT}.service 2>/dev/null; true; }} && "
            f"systemd-run --quiet --unit={FIREWALL_REVERT} --on-active={int(confirm_s)}s "
            f"--timer-property=AccuracySec=1s /bin/sh -c {revert} && "
            f"{{ nft -f {pending} || {{ sh -c {revert}; exit 7; }}; }}")


def confirm_command(digest: str) -> str:
    """
    Over a new SSH connection: stop the undoing, keep the policy for boot, record what is in force.
    Exits 1 when the host had undone it already.

    + digest: the policy's digest
    """
    q = shlex.quote
    pending, rules, state = q(LAYOUT.firewall_pending), q(LAYOUT.firewall_rules), q(LAYOUT.firewall_state)
    return (f"systemctl stop {FIREWALL_REVERT}.timer 2>/dev/null; "
            f"[ -f {pending} ] || {{ echo 'the host had undone the policy already: confirmed too late' >&2; exit 1; }}; "
            f"mv -f {pending} {rules} && rm -f {q(LAYOUT.firewall_previous)} && "
            f"l=$(nft -s list table {TABLE}) && "
            f"printf '%s\\n%s\\n' {q(digest)} \"$(printf '%s\\n' \"$l\" | sha256sum | cut -c1-64)\" > {state}.tmp && "
            f"mv -f {state}.tmp {state} && "
            f"printf %s {q(UNIT)} > {q(UNIT_FILE)} && systemctl daemon-reload && "
            f"systemctl enable --quiet {FIREWALL_UNIT}")


def revert_command() -> str:
    """Undo a pending policy now (the timer's job, done early where the old connection still answers)."""
    return f"systemctl stop {FIREWALL_REVERT}.timer 2>/dev/null; {_revert()}"


def remove_command() -> str:
    """``firewall = false``: sglfleet's table, its boot unit and its files go; other tables stay."""
    q = shlex.quote
    files = [LAYOUT.firewall_rules, LAYOUT.firewall_pending, LAYOUT.firewall_previous, LAYOUT.firewall_state, UNIT_FILE]
    return (f"systemctl stop {FIREWALL_REVERT}.timer 2>/dev/null; systemctl disable --quiet {FIREWALL_UNIT} "
            f"2>/dev/null; nft delete table {TABLE} 2>/dev/null; rm -f {' '.join(q(f) for f in files)}; "
            f"systemctl daemon-reload")
