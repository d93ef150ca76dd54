"""
The local fleet: real Debian hosts on this machine, booted with systemd-nspawn.

Each host is its own systemd as PID 1 on a copy-on-write root (overlayfs over
one cached debootstrap rootfs), its own network namespace with a veth link on a
bridge, its own address and its own sshd with a per-host key recorded in a
known_hosts file, so pyinfra runs against it over real SSH with strict host-key
checking. State lives in ``.fleet/`` (``fleet.json``); every process is stopped
through the pids recorded there, never a name pattern.

One module per part: ``rootfs`` (the cached debootstrap tree), ``network`` (the
bridge and the hosts' links), ``ssh`` (keys, known_hosts, ssh_config),
``processes`` (pids, mounts, cgroups), ``fleet`` (``Fleet``) and ``memory``.

**Example:**

.. code:: python

    fleet = Fleet()
    fleet.up(3)
    print(fleet.exec("node1", "systemctl is-system-running").stdout)
    fleet.down()
"""

from sglfleet.devfleet.errors import DevFleetError
from sglfleet.devfleet.fleet import BOOT_TIMEOUT, FAULT_FILE, FAULT_MODES, FLEET_DIR, INVENTORY, Fleet
from sglfleet.devfleet.memory import idle_memory
from sglfleet.devfleet.network import BRIDGE, PREFIX, SUBNET
# Private, but tests check pids and cgroups with them.
from sglfleet.devfleet.processes import _alive, _cgroups
from sglfleet.devfleet.rootfs import CACHE, OSES, PACKAGES, PYTHONS, ROOTFS, SUITE, apt_mirror, build_rootfs, rootfs_of

__all__ = ["Fleet", "DevFleetError", "build_rootfs", "apt_mirror", "idle_memory"]
