"""
The root filesystems hosts boot from: one debootstrap of Debian per release, cached.

Each host mounts its OS's tree read-only as the lower layer of its own overlay,
so what is there is shared by all hosts of that OS and must hold nothing per
host (keys, machine-id). Debian 12 (bookworm, Python 3.11, glibc 2.36) is the
default; Debian 13 (trixie, Python 3.13, glibc 2.41) boots beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from pathlib import Path

from sglfleet import cache_dir
from sglfleet.devfleet.errors import DevFleetError
from sglfleet.devfleet.processes import _locked, _remove_tree, _run, _unmount_all

CACHE = cache_dir()

SUITE = "bookworm"  # the default OS, and the suite this machine's apt sources name
# systemd-sysv gives /sbin/init; util-linux (flock) is Essential, so always in;
# systemd ships systemd-analyze in bookworm; iputils-ping for link checks; sudo
# for the production connection (a user with sudo, not root); aria2 fetches
# files from peer hosts; node_exporter serves sglfleet.prom from its textfile
# folder (Debian's default, /var/lib/prometheus/node-exporter) on :9100.
PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "openssh-server", "python3",
    "python3-venv", "iproute2", "procps", "iputils-ping", "sudo", "aria2",
    "prometheus-node-exporter",
    "nftables",  # sglfleet's policy, table inet sglfleet (sglfleet.plan.network)
]

SSHD_CONFIG = """\
# sglfleet local fleet: by key only, one per-host ed25519 host key. Each host's
# overlay holds the fleet's key for root and, in /etc/ssh/authorized_keys/, for
# the login users below.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile .ssh/authorized_keys /etc/ssh/authorized_keys/%u
UseDNS no
"""

# Login users with the fleet's key, and what sudo grants each. ``deploy`` is how
# production hosts are reached; the other two are for the refusal tests.
SUDOERS = {
    "deploy": "deploy ALL=(ALL:ALL) NOPASSWD: ALL\n",
    "pwsudo": "pwsudo ALL=(ALL:ALL) ALL\n",  # sudo asks for a password (pwsudo has none)
    "nosudo": None,                          # not in sudoers: sudo refuses
}
LOGIN_USERS = tuple(SUDOERS)

# The packages of each OS a host may run: the same names in both (each checked
# in trixie's archive: aria2 1.37, prometheus-node-exporter 1.9, python3 3.13,
# systemd 257, which still ships systemd-analyze).
OSES = {"bookworm": PACKAGES, "trixie": PACKAGES}
# The python3 each ships (major.minor): what a stack builds for on its hosts.
PYTHONS = {"bookworm": "3.11", "trixie": "3.13"}


def rootfs_of(os_name: str = SUITE) -> Path:
    """
    The cached tree hosts of ``os_name`` boot from, named by what goes into it.

    A change of the recipe builds a new tree beside the old one, which hosts
    still running keep using; bookworm's name is the one it had before trixie.

    + os_name: a Debian suite in ``OSES``

    **Example:**

    .. code:: python

        rootfs_of("trixie")  # .cache/rootfs-<12 hex>
    """
    if os_name not in OSES:
        raise DevFleetError(f"no local OS named {os_name!r}: use one of {', '.join(OSES)}")
    recipe = json.dumps([os_name, OSES[os_name], SSHD_CONFIG, SUDOERS, 1]).encode()
    return CACHE / f"rootfs-{hashlib.sha256(recipe).hexdigest()[:12]}"


ROOTFS = rootfs_of(SUITE)


def apt_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """
    The Debian mirror this machine's own apt sources use for the main suite
    (one archive holds every suite, so trixie comes from it too).

    + etc_apt: apt's configuration folder (deb822 ``*.sources`` and one-line ``*.list``)

    **Example:**

    .. code:: python

        apt_mirror()  # "http://deb.debian.org/debian"
    """
    candidates = []
    sources = etc_apt / "sources.list.d"
    for path in sorted(sources.glob("*.sources")) if sources.is_dir() else []:
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines()
                if ":" in line and not line.startswith("#") and not line.startswith(" ")
            )
            if fields.get("Enabled", "yes").strip() == "no":
                continue
            suites = fields.get("Suites", "").split()
            if "deb" in fields.get("Types", "").split() and SUITE in suites:
                candidates.extend(fields.get("URIs", "").split())
    for path in [etc_apt / "sources.list", *sorted(sources.glob("*.list"))]:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                candidates.append(words[1])
    if not candidates:
        raise DevFleetError(
            f"no apt source for Debian {SUITE} in {etc_apt}/sources.list(.d); add one "
            f"(e.g. URIs: http://deb.debian.org/debian) so the rootfs can be built"
        )
    return candidates[0]


def build_rootfs(rootfs: Path = ROOTFS, log=print, os_name: str = SUITE) -> Path:
    """
    Build the cached host rootfs once with debootstrap; reuse it afterwards.

    + rootfs: where the finished tree lives; it is built beside it and renamed
      into place only when complete, so a half-built tree is never used.
    + os_name: the Debian suite it holds (``OSES``)

    **Example:**

    .. code:: python

        build_rootfs()  # about a minute the first time, instant after
        build_rootfs(rootfs_of("trixie"), os_name="trixie")
    """
    if (rootfs / ".sglfleet-rootfs.json").is_file():
        return rootfs
    with _locked(rootfs.parent / "rootfs.lock"):
        if (rootfs / ".sglfleet-rootfs.json").is_file():
            return rootfs
        if not shutil.which("debootstrap"):
            raise DevFleetError("building the rootfs needs debootstrap: apt-get install debootstrap")
        mirror = apt_mirror()
        tmp = rootfs.with_name(rootfs.name + ".tmp")
        _remove_tree(tmp)
        _remove_tree(rootfs)  # an incomplete tree without its marker
        log(f"building rootfs: debootstrap --variant=minbase {os_name} from {mirror}")
        started = time.monotonic()
        result = _run([
            "debootstrap", "--variant=minbase", f"--include={','.join(OSES[os_name])}",
            os_name, str(tmp), mirror,
        ], check=False)
        if result.returncode != 0:
            _unmount_all(tmp)
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
            raise DevFleetError(f"debootstrap of {os_name} from {mirror} failed:\n{tail}")
        _configure_rootfs(tmp)
        (tmp / ".sglfleet-rootfs.json").write_text(json.dumps({
            "suite": os_name, "mirror": mirror, "packages": OSES[os_name],
            "built_s": round(time.monotonic() - started, 1),
        }, indent=2) + "\n")
        os.rename(tmp, rootfs)
        log(f"rootfs ready in {time.monotonic() - started:.0f}s: {rootfs}")
    return rootfs


def _configure_rootfs(root: Path) -> None:
    """What every host shares: sshd by key only, the login users, networkd, no per-host identity."""
    (root / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/ssh/sshd_config.d/sglfleet.conf").write_text(SSHD_CONFIG)
    # Host keys and machine-id are per host (written into each overlay), never shared.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for name in ("etc/machine-id", "var/lib/dbus/machine-id", "etc/hostname"):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
    for user, rule in SUDOERS.items():
        _run(["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", user])
        if rule:
            sudoers = root / "etc/sudoers.d" / f"sglfleet-{user}"
            sudoers.write_text(rule)
            sudoers.chmod(0o440)
    _run(["chroot", str(root), "systemctl", "enable", "ssh.service", "systemd-networkd.service"])
    # apt's timers would wake every host at once on a 2-core machine for nothing.
    _run(["chroot", str(root), "systemctl", "mask", "apt-daily.timer", "apt-daily-upgrade.timer"])
    (root / "etc/default/locale").write_text("LANG=C.UTF-8\n")  # pam_env warns at each login without it
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
