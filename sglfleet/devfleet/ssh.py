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
    Write known_hosts and ssh_config for ``hosts``, in host order (node1, node2, ...),
    and ``<ssh_config>.jump``, which reaches every host but node1 through node1
    (``ProxyJump``), as GPU fleets behind a bastion are reached.

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
    names = sorted(hosts, key=lambda h: int(h[4:]))
    behind = " ".join(hosts[name]["address"] for name in names[1:])
    jump = (f"Host bastion\n  HostName {hosts[names[0]]['address']}\n  User deploy\n"
            f"  IdentityFile {ssh_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n"
            f"  StrictHostKeyChecking yes\n\n") if names else ""
    jump += f"Host {behind}\n  ProxyJump bastion\n" if behind else ""
    jump_config(ssh_config).write_text(jump)


def jump_config(ssh_config: Path) -> Path:
    """The ssh_config that reaches hosts through node1 (see ``write_ssh_files``)."""
    return ssh_config.with_name(ssh_config.name + ".jump")
