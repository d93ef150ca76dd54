"""
The fleet's SSH files: keys, and a known_hosts and ssh_config for every host.

Each host has its own host key, recorded in known_hosts when the host is made,
so pyinfra and ``ssh`` reach it with strict host-key checking.
"""

from __future__ import annotations

from pathlib import Path

from sglfleet.devfleet.processes import _run


def keygen(path: Path, comment: str) -> None:
    """A new ed25519 key pair without a passphrase: ``path`` and ``path.pub``."""
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def write_ssh_files(hosts: dict, ssh_key: Path, known_hosts: Path, ssh_config: Path) -> None:
    """
    Write known_hosts and ssh_config for ``hosts``, in host order (node1, node2, ...).

    + hosts: the ``hosts`` of fleet.json: each with its ``address`` and ``host_key``
    + ssh_key: the client key every ``Host`` entry logs in with, as root

    **Example:**

    .. code:: python

        write_ssh_files(state["hosts"], fleet.ssh_key, fleet.known_hosts, fleet.ssh_config)
    """
    lines, config = [], []
    for name in sorted(hosts, key=lambda h: int(h[4:])):
        record = hosts[name]
        lines.append(f"{record['address']} {' '.join(record['host_key'])}\n")
        config.append(
            f"Host {name}\n  HostName {record['address']}\n  User root\n"
            f"  IdentityFile {ssh_key}\n  IdentitiesOnly yes\n  BatchMode yes\n"
            f"  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking yes\n"
            f"  LogLevel ERROR\n\n")
    known_hosts.write_text("".join(lines))
    ssh_config.write_text("".join(config))
