"""
The fleet: its hosts booted, reached, faulted and stopped, as ``fleet.json`` records them.

Every process is stopped through the pids recorded there, never a name pattern.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import hashlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sglfleet import FILES, PROJECT_ROOT
from sglfleet.devfleet.errors import DevFleetError
from sglfleet.devfleet.network import (
    BRIDGE, PREFIX, SUBNET, delete_link, ensure_bridge, set_host_link, veth_of,
)
from sglfleet.devfleet.processes import (
    _alive, _cgroups, _leader_of, _locked, _proc_start_time, _remove_tree, _run,
)
from sglfleet.devfleet.rootfs import LOGIN_USERS, OSES, PYTHONS, SUITE, build_rootfs, rootfs_of
from sglfleet.devfleet.ssh import keygen, write_ssh_files
from sglfleet.host.layout import LAYOUT

FLEET_DIR = Path(os.environ.get("SGLFLEET_FLEET_DIR", PROJECT_ROOT / ".fleet"))
INVENTORY = PROJECT_ROOT / "inventory" / "dev.py"
# The OS of hosts booted without one asked, cycled over node1..nodeN ("bookworm,trixie"
# alternates): a whole suite may run on trixie, or on a mixed fleet.
DEFAULT_OSES = tuple(os.environ.get("SGLFLEET_DEVFLEET_OS", SUITE).split(","))
BOOT_TIMEOUT = 120.0
# inotify instances to leave room for, per host: an idle host holds about 8 (systemd, its
# journal, logind, sshd), a serving one a few more.
INOTIFY_PER_HOST = 16
FAULT_FILE = LAYOUT.fault_file


def _standin_faults():
    """The stand-in's fault module, read from files/standin/ (stdlib only): the modes live there alone."""
    name = "sglfleet_standin_faults"
    spec = importlib.util.spec_from_file_location(name, FILES / "standin" / "standin_faults.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


FAULT_MODES = _standin_faults().FAULTS
# Two take arguments: "slow-load <seconds>", "slow-after <seconds> [<factor>]"
FAULT_PARAMS = {"slow-load": (1, 1), "slow-after": (1, 2)}  # mode -> (fewest, most) numbers


def _known_fault(mode: str) -> bool:
    """A fault mode, with its numbers (each >= 0) where it takes them."""
    word, *params = mode.split() or [""]
    fewest, most = FAULT_PARAMS.get(word, (0, 0))
    try:
        return word in FAULT_MODES and fewest <= len(params) <= most and all(float(p) >= 0 for p in params)
    except ValueError:
        return False


def _freeze(cgroup: Path, timeout: float = 5) -> None:
    """Freeze a cgroup2 group and wait until all of its tasks are stopped."""
    (cgroup / "cgroup.freeze").write_text("1")
    deadline = time.monotonic() + timeout
    while "frozen 1" not in (cgroup / "cgroup.events").read_text() and time.monotonic() < deadline:
        time.sleep(0.01)


@dataclass
class Fleet:
    """
    A local fleet of systemd-nspawn hosts, described by ``state_dir/fleet.json``.

    + state_dir: where keys, overlays and fleet.json live (``.fleet/``)
    + subnet: the private /24 the bridge and hosts take addresses from
    + bridge: the bridge all host links attach to
    + prefix: prepended to nspawn machine names (host-side link ``vb-<prefix>node1``),
      so a second fleet can run beside the default one
    + rootfs: one tree every host boots from (a test's); None: each host its OS's
      (``rootfs.rootfs_of``)

    **Example:**

    .. code:: python

        fleet = Fleet()
        fleet.up(3)
        fleet.exec("node2", "hostname").stdout  # "node2\\n"
        fleet.add(1, oses=["trixie"])  # node4, Debian 13
    """

    state_dir: Path = FLEET_DIR
    subnet: str = SUBNET
    bridge: str = BRIDGE
    prefix: str = PREFIX
    rootfs: Path | None = None
    inventory: Path = INVENTORY
    log: object = field(default=print, repr=False)

    def __post_init__(self):
        self.state_dir = Path(self.state_dir)
        self._save_lock = threading.Lock()

    # paths and state

    @property
    def state_file(self) -> Path:
        return self.state_dir / "fleet.json"

    @property
    def ssh_key(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def secrets_file(self) -> Path:
        """
        The controller's secrets file for this fleet's runs (its keys, ``sglfleet keys``): outside the
        repository, where sglfleet refuses one, and one for each fleet, named for its state folder.
        """
        digest = hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:8]
        return Path.home() / ".config" / "sglfleet" / f"devfleet-{self.state_dir.name.lstrip('.')}-{digest}.env"

    def state(self) -> dict:
        """fleet.json as a dict, or an empty fleet when there is none."""
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {"hosts": {}}

    def _save(self, state: dict) -> None:
        with self._save_lock:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(state, indent=2) + "\n")
            os.rename(tmp, self.state_file)

    @property
    def hosts(self) -> list[str]:
        """Host names in order: node1, node2, ..."""
        return sorted(self.state()["hosts"], key=lambda name: int(name[4:]))

    def address(self, host: str) -> str:
        return self._host(host)["address"]

    def os_of(self, host: str) -> str:
        """The Debian suite ``host`` runs (bookworm for a host booted before hosts had one)."""
        return self._host(host).get("os", SUITE)

    def python_of(self, host: str) -> str:
        """The major.minor of ``host``'s python3, as its OS ships it ("3.13" on trixie)."""
        return PYTHONS[self.os_of(host)]

    def _host(self, host: str) -> dict:
        hosts = self.state()["hosts"]
        if host not in hosts:
            names = ", ".join(self.hosts) or "none (run: sglfleet devfleet up)"
            raise DevFleetError(f"{host}: no such host in the local fleet; hosts: {names}")
        return hosts[host]

    # ssh

    def ssh_argv(self, host: str, timeout: float = 5) -> list[str]:
        """ssh to ``host`` as root with the fleet key and strict host-key checking."""
        return [
            "ssh", "-F", "/dev/null", "-i", str(self.ssh_key),
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", f"ConnectTimeout={int(timeout)}",
            "-o", "LogLevel=ERROR", f"root@{self.address(host)}",
        ]

    def exec(self, host: str, cmd: str, check: bool = True, timeout: float | None = 60,
             ) -> subprocess.CompletedProcess:
        """
        Run a shell command on ``host`` over SSH.

        + host: node1..nodeN
        + cmd: a shell command line, run by root's shell on the host
        + check: raise CalledProcessError on a non-zero exit
        + timeout: seconds before giving up

        **Example:**

        .. code:: python

            fleet.exec("node1", "cat /etc/hostname").stdout
        """
        return subprocess.run(self.ssh_argv(host) + ["--", cmd], check=check, text=True,
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def inside(self, host: str, cmd: str, check: bool = True, timeout: float | None = 60,
               ) -> subprocess.CompletedProcess:
        """
        Run a shell command on ``host`` as root through its namespaces (nsenter), not SSH.

        Nothing logs in, so a test can act on hosts while it checks who logged in.

        + host: node1..nodeN
        + cmd: a shell command line, run by the host's ``sh`` as root
        + check: raise CalledProcessError on a non-zero exit
        + timeout: seconds before giving up

        **Example:**

        .. code:: python

            fleet.inside("node1", "readlink /opt/sglfleet/current").stdout
        """
        record = self._host(host)
        if not _alive(record.get("leader_pid"), record.get("leader_start")):
            raise DevFleetError(f"{host}: not running; run: sglfleet devfleet up")
        return subprocess.run(
            ["nsenter", "-t", str(record["leader_pid"]), "--all", "env", "-i",
             "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "sh", "-c", cmd],
            check=check, text=True, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def system_state(self, host: str) -> str:
        """What ``systemctl is-system-running`` answers, or ``unreachable``."""
        try:
            result = self.exec(host, "systemctl is-system-running", check=False, timeout=10)
        except subprocess.TimeoutExpired:
            return "unreachable"
        if result.returncode == 255:
            return "unreachable"
        return result.stdout.strip() or "unknown"

    def fault(self, host: str, mode: str) -> None:
        """
        Set the stand-in's fault mode on ``host`` for starts of any release but
        the one serving now.

        + mode: crash, hang, unready, slow, slow-load <seconds>, slow-after <seconds> [<factor>], corrupt-cache,
          update-fails; or clear
          to remove the fault

        **Example:**

        .. code:: python

            fleet.fault("node2", "unready")
        """
        # Through nsenter, as a hand on the host would: no login shows in its logs.
        if mode == "clear":
            self.inside(host, f"rm -f {FAULT_FILE}")
        elif _known_fault(mode):
            # The release serving now is spared: the fault hits the next release
            # started on the host, and a rollback to this one serves again.
            self.inside(host, f"mkdir -p {os.path.dirname(FAULT_FILE)} && echo {mode} > {FAULT_FILE} && "
                            f"if r=$(readlink {LAYOUT.current}); then echo spare ${{r##*/}} >> {FAULT_FILE}; fi; "
                            f"chmod 644 {FAULT_FILE}")
        else:
            raise DevFleetError(f"{host}: unknown fault {mode!r}; use one of "
                                f"{', '.join(FAULT_MODES)}, clear")

    # fault helpers for gate and rollback tests

    def kill_host(self, host: str) -> None:
        """
        Kill ``host`` at once, as a power cut would: every process stops in the
        same instant (frozen, then killed), so none sees the others die first.
        """
        record = self._host(host)
        if _alive(record.get("leader_pid"), record.get("leader_start")):
            payloads = [path / "payload" for path in _cgroups(record["machine"])
                        if (path / "payload" / "cgroup.kill").exists()]
            for payload in payloads:
                _freeze(payload)
                (payload / "cgroup.kill").write_text("1")
            if not payloads:  # no cgroup2 freezer: the container's init, then its namespace
                os.kill(record["leader_pid"], signal.SIGKILL)
        self._wait_gone(record, 10)

    def stop_host(self, host: str) -> None:
        """Shut ``host`` down cleanly; ``up`` boots it again."""
        self._stop(self._host(host))

    def cut_link(self, host: str) -> None:
        """Take ``host``'s network link down (the host keeps running)."""
        self._nsenter_ip(host, "down")

    def restore_link(self, host: str) -> None:
        """Bring ``host``'s network link back up after ``cut_link``."""
        self._nsenter_ip(host, "up")

    def _nsenter_ip(self, host: str, updown: str) -> None:
        record = self._host(host)
        if not _alive(record.get("leader_pid"), record.get("leader_start")):
            raise DevFleetError(f"{host}: not running; run: sglfleet devfleet up")
        set_host_link(record["leader_pid"], updown)

    # status

    def status(self) -> list[dict]:
        """One row per host: name, address, pids, and its system state."""
        rows = []
        for name in self.hosts:
            record = self._host(name)
            alive = _alive(record.get("nspawn_pid"), record.get("nspawn_start"))
            rows.append({
                "host": name, "address": record["address"], "os": record.get("os", SUITE),
                "nspawn_pid": record.get("nspawn_pid"), "leader_pid": record.get("leader_pid"),
                "state": self.system_state(name) if alive else "stopped",
            })
        return rows

    # up

    def preflight(self, oses=(SUITE,)) -> None:
        """Root and the tools ``up`` needs for hosts of ``oses``, each missing one with what to install."""
        missing = [
            f"{tool} (apt-get install {package})"
            for tool, package in [
                ("systemd-nspawn", "systemd-container"), ("ssh", "openssh-client"),
                ("ssh-keygen", "openssh-client"), ("ip", "iproute2"),
                ("nsenter", "util-linux"), ("mount", "mount"),
            ] + ([] if all((self._rootfs(name) / ".sglfleet-rootfs.json").is_file() for name in oses)
                 else [("debootstrap", "debootstrap")])
            if not shutil.which(tool)
        ]
        if missing:
            raise DevFleetError("the local fleet needs: " + ", ".join(missing))
        if os.geteuid() != 0:
            raise DevFleetError("the local fleet needs root (systemd-nspawn, overlay mounts, "
                                "links); run as root, e.g. sudo sglfleet devfleet up")

    def up(self, n: int = 3, boot_timeout: float = BOOT_TIMEOUT, oses: list[str] | None = None) -> dict:
        """
        Boot hosts node1..node``n``; hosts already running are left as they are.

        + n: how many hosts; fewer than now running stops the extra ones
        + boot_timeout: seconds a host may take until ``is-system-running`` answers
        + oses: the Debian suites of node1..node``n``, cycled (``["bookworm", "trixie"]``
          alternates); a running host of another OS is refused. None: hosts
          running keep theirs, new ones get ``$SGLFLEET_DEVFLEET_OS`` (bookworm)

        Returns ``{"started": [...], "stopped": [...], "kept": [...]}``.

        **Example:**

        .. code:: python

            Fleet().up(3)
            Fleet().up(2, oses=["bookworm", "trixie"])
        """
        if n < 1:
            raise DevFleetError(f"--hosts must be 1 or more, not {n}")
        asked = {f"node{i}": oses[(i - 1) % len(oses)] for i in range(1, n + 1)} if oses else {}
        return self._grow(n, boot_timeout, asked, strict=bool(oses))

    def add(self, count: int = 1, oses: list[str] | None = None, boot_timeout: float = BOOT_TIMEOUT) -> dict:
        """
        Boot ``count`` more hosts after the last one; the others are left as they are.

        + count: how many hosts to add
        + oses: the new hosts' Debian suites, cycled; None: ``$SGLFLEET_DEVFLEET_OS`` (bookworm)

        **Example:**

        .. code:: python

            Fleet().add(1, oses=["trixie"])  # node4 on a fleet of 3
        """
        if count < 1:
            raise DevFleetError(f"--hosts must be 1 or more, not {count}")
        have = len(self.hosts)
        oses = oses or list(DEFAULT_OSES)
        asked = {f"node{have + i}": oses[(i - 1) % len(oses)] for i in range(1, count + 1)}
        return self._grow(have + count, boot_timeout, asked, strict=False)

    def _grow(self, n: int, boot_timeout: float, asked: dict[str, str], strict: bool) -> dict:
        unknown = sorted(set(asked.values()) - set(OSES))
        if unknown:
            raise DevFleetError(f"no local OS named {', '.join(unknown)}: use {', '.join(OSES)}")
        self.preflight(sorted(set(asked.values()) | set(DEFAULT_OSES)))
        with _locked(self.state_dir / "lock"):
            self._inotify_room(n)
            return self._up(n, boot_timeout, asked, strict)

    def _rootfs(self, os_name: str) -> Path:
        return self.rootfs or rootfs_of(os_name)

    def _inotify_room(self, n: int) -> None:
        """
        Room for every host's inotify instances: the hosts' systemds all count against
        root's one limit (fs.inotify.max_user_instances, 128 by default), and an idle
        host holds about 8, so past some 15 hosts their path units fail to start.
        """
        limit = Path("/proc/sys/fs/inotify/max_user_instances")
        wanted = 128 + INOTIFY_PER_HOST * n
        current = int(limit.read_text())
        if current < wanted:
            try:
                limit.write_text(str(wanted))
            except OSError as error:
                raise DevFleetError(f"{n} hosts need fs.inotify.max_user_instances >= {wanted} (it is {current}) "
                                    f"and it cannot be raised here ({error.strerror}): "
                                    f"sysctl -w fs.inotify.max_user_instances={wanted}, or boot fewer hosts") from None
            self.log(f"fs.inotify.max_user_instances raised from {current} to {wanted} "
                     f"({INOTIFY_PER_HOST} for each of {n} hosts)")

    def _up(self, n: int, boot_timeout: float, asked: dict[str, str], strict: bool) -> dict:
        state = self.state()
        state.setdefault("hosts", {})
        self._same_network(state)
        state["prefix"] = self.prefix
        wanted = [f"node{i}" for i in range(1, n + 1)]
        changes = {"started": [], "stopped": [], "kept": []}
        if strict:  # before anything stops: a host's OS changes only by a new host
            other = [f"{name} runs {state['hosts'][name].get('os', SUITE)} (asked: {asked[name]})"
                     for name in wanted if name in state["hosts"]
                     and state["hosts"][name].get("os", SUITE) != asked[name]]
            if other:
                raise DevFleetError(f"{'; '.join(other)}: bring the fleet down first (sglfleet devfleet "
                                    "down), or ask for the OS each host runs")
        # A host booted again keeps its OS; a new one takes what was asked, else the default.
        os_of = {name: asked.get(name) or state["hosts"].get(name, {}).get("os")
                 or DEFAULT_OSES[(int(name[4:]) - 1) % len(DEFAULT_OSES)] for name in wanted}

        for name in [h for h in state["hosts"] if h not in wanted]:
            self._stop(state["hosts"][name])
            self._clean_host(state["hosts"].pop(name))
            changes["stopped"].append(name)
            self._save(state)
        for name in [h for h in wanted if h in state["hosts"]]:
            record = state["hosts"][name]
            if _alive(record.get("nspawn_pid"), record.get("nspawn_start")):
                changes["kept"].append(name)
            else:  # crashed or killed: clean its leftovers and boot it again
                self._stop(record)
                self._clean_host(state["hosts"].pop(name))
        to_start = [h for h in wanted if h not in state["hosts"]]
        if not to_start:
            if state["hosts"]:  # files of this version of sglfleet, for a fleet an older one booted
                write_ssh_files(state["hosts"], self.ssh_key, self.known_hosts, self.ssh_config)
            self._save(state)
            return changes

        for os_name in sorted({os_of[name] for name in to_start}):
            build_rootfs(self._rootfs(os_name), log=self.log, os_name=os_name)
        ensure_bridge(state, self.bridge, self.subnet, self._save)
        self._client_key(state)
        for name in to_start:
            state["hosts"][name] = self._prepare_host(name, state, os_of[name])
        write_ssh_files(state["hosts"], self.ssh_key, self.known_hosts, self.ssh_config)
        self._save(state)

        # Boot in parallel; each thread records its pids in fleet.json as soon as known.
        with concurrent.futures.ThreadPoolExecutor(len(to_start)) as pool:
            futures = {pool.submit(self._boot, state, name, boot_timeout): name
                       for name in to_start}
            failures = {}
            for future in concurrent.futures.as_completed(futures):
                try:
                    future.result()
                except DevFleetError as error:
                    failures[futures[future]] = str(error)
                except (OSError, subprocess.SubprocessError) as error:  # mount, spawn
                    detail = getattr(error, "stderr", None) or error
                    failures[futures[future]] = f"{futures[future]}: did not come up: {detail}"
        if failures:
            for name in to_start:
                self._stop(state["hosts"][name])
                self._clean_host(state["hosts"].pop(name))
            write_ssh_files(state["hosts"], self.ssh_key, self.known_hosts, self.ssh_config)
            self._save(state)
            if not state["hosts"]:
                self._teardown_fleet(state)
            raise DevFleetError("\n".join(failures[name] for name in sorted(failures))
                                + "\nthe hosts this run started were torn down")
        changes["started"] = to_start
        return changes

    def _same_network(self, state: dict) -> None:
        """Refuse to add hosts to a running fleet on another bridge, subnet or prefix."""
        if not state["hosts"]:
            return
        booted = {"bridge": state.get("bridge", self.bridge), "subnet": state.get("subnet", self.subnet),
                  "prefix": state.get("prefix", self.prefix)}
        asked = {"bridge": self.bridge, "subnet": self.subnet, "prefix": self.prefix}
        if booted != asked:
            differ = ", ".join(f"{key} {booted[key]} (asked: {asked[key]})"
                               for key in booted if booted[key] != asked[key])
            raise DevFleetError(
                f"the fleet in {self.state_dir} runs with {differ}; set SGLFLEET_DEVFLEET_* "
                "as when it came up, or bring it down first")

    def _client_key(self, state: dict) -> None:
        if not self.ssh_key.is_file():
            self.state_dir.mkdir(parents=True, exist_ok=True)
            keygen(self.ssh_key, "sglfleet-devfleet")
        state.update(ssh_key=str(self.ssh_key), known_hosts=str(self.known_hosts),
                     ssh_config=str(self.ssh_config), inventory=str(self.inventory))

    def _prepare_host(self, name: str, state: dict, os_name: str) -> dict:
        """Per-host overlay files: hostname, machine-id, host key, root's key, address; the OS it boots."""
        net = ipaddress.ip_network(self.subnet)
        address = str(net[10 + int(name[4:])])
        machine = f"{self.prefix}{name}"
        veth = veth_of(machine)
        if veth in {link["ifname"] for link in json.loads(_run(["ip", "-j", "link"]).stdout)}:
            raise DevFleetError(f"{name}: link {veth} already exists and is not this fleet's; "
                                f"remove it (ip link del {veth})")
        home = self.state_dir / "hosts" / name
        _remove_tree(home)
        upper, work, root = home / "upper", home / "work", home / "root"
        for path in (upper, work, root):
            path.mkdir(parents=True)
        etc = upper / "etc"
        (etc / "ssh").mkdir(parents=True)
        (etc / "systemd/network").mkdir(parents=True)
        (upper / "root/.ssh").mkdir(parents=True, mode=0o700)
        (etc / "hostname").write_text(name + "\n")
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}\n" + "".join(
            f"{str(net[10 + i])} node{i}\n" for i in range(1, 255 - 10)
        ))
        (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
        key = etc / "ssh/ssh_host_ed25519_key"
        keygen(key, f"root@{name}")
        shutil.copy(self.ssh_key.with_suffix(".pub"), upper / "root/.ssh/authorized_keys")
        (upper / "root/.ssh/authorized_keys").chmod(0o600)
        # Root-owned keys for the login users (sshd's AuthorizedKeysFile), so the
        # shared rootfs need not know the fleet's key or chown per host.
        (etc / "ssh/authorized_keys").mkdir()
        for user in LOGIN_USERS:
            shutil.copy(self.ssh_key.with_suffix(".pub"), etc / "ssh/authorized_keys" / user)
        # Overrides the container default (DHCP on host0) with a fixed address.
        (etc / "systemd/network/80-container-host0.network").write_text(
            f"[Match]\nName=host0\n\n[Network]\nAddress={address}/{net.prefixlen}\n"
            f"Gateway={net[1]}\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n")
        return {
            "address": address, "machine": machine, "home": str(home), "root": str(root),
            "os": os_name, "rootfs": str(self._rootfs(os_name)),
            "host_key": (key.with_suffix(".pub")).read_text().split()[:2],
            "console_log": str(home / "console.log"),
            "nspawn_pid": None, "nspawn_start": None, "leader_pid": None, "leader_start": None,
        }

    def _boot(self, state: dict, name: str, boot_timeout: float) -> None:
        record = state["hosts"][name]
        home, root = Path(record["home"]), Path(record["root"])
        _run(["mount", "-t", "overlay", "overlay", "-o",
              f"lowerdir={record.get('rootfs') or self._rootfs(SUITE)},upperdir={home / 'upper'},workdir={home / 'work'}",
              str(root)])
        # Each host gets its own cgroup: started from one shared cgroup, the hosts'
        # systemds would all manage the same /payload tree and race (units fail).
        cgroups = _cgroups(record["machine"], create=True)
        enter = "".join(f"echo $$ > {shlex.quote(str(path / 'cgroup.procs'))}; " for path in cgroups)
        console = open(record["console_log"], "w")
        process = subprocess.Popen(
            ["sh", "-c", enter + 'exec "$@"', "sh",
             "systemd-nspawn", "--boot", "--register=no", "--keep-unit", "--settings=no",
             f"--machine={record['machine']}", f"--hostname={name}", "-D", str(root),
             f"--network-bridge={self.bridge}", "--link-journal=no", "--resolv-conf=off",
             "--timezone=off", "--console=read-only"],
            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            start_new_session=True,  # our Ctrl-C must not reach the host; down stops it
        )
        console.close()
        record.update(nspawn_pid=process.pid, nspawn_start=_proc_start_time(process.pid))
        self._save(state)
        deadline = time.monotonic() + boot_timeout
        while record["leader_pid"] is None:
            leader = _leader_of(process.pid)
            if leader:
                record.update(leader_pid=leader, leader_start=_proc_start_time(leader))
                self._save(state)
            elif process.poll() is not None or time.monotonic() > deadline:
                raise DevFleetError(self._boot_failure(name, "nspawn exited" if process.poll()
                                                       is not None else "no container init"))
            else:
                time.sleep(0.05)
        # sshd answers first; --wait then returns once boot is finished.
        answer = None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DevFleetError(self._boot_failure(name, f"nspawn exited {process.returncode}"))
            left = max(1, int(deadline - time.monotonic()))
            try:
                result = self.exec(name, "timeout %d systemctl is-system-running --wait" % left,
                                   check=False, timeout=left + 5)
            except subprocess.TimeoutExpired:
                continue
            if result.returncode != 255:
                answer = result.stdout.strip()
                break
            time.sleep(0.2)
        if answer is None:
            raise DevFleetError(self._boot_failure(name, f"no SSH answer within {boot_timeout:.0f}s"))
        if answer != "running":
            failed = self.exec(name, "systemctl --failed --no-legend --plain", check=False).stdout
            raise DevFleetError(self._boot_failure(
                name, f"systemctl is-system-running says {answer!r}; failed units: "
                      f"{' '.join(line.split()[0] for line in failed.splitlines() if line) or 'none'}"))
        record["booted_s"] = round(boot_timeout - (deadline - time.monotonic()), 2)
        self._save(state)

    def _boot_failure(self, name: str, why: str) -> str:
        log = self.state_dir / "hosts" / name / "console.log"
        tail = log.read_text(errors="replace").splitlines()[-20:] if log.is_file() else []
        return f"{name}: did not come up ({why}); boot log tail:\n  " + "\n  ".join(tail)

    # down

    def down(self) -> list[str]:
        """
        Stop every host by its recorded pids and remove links, overlays and state.

        Safe after a crash, a half-started fleet, and when run twice. Returns the
        hosts that were stopped.

        **Example:**

        .. code:: python

            Fleet().down()
        """
        with _locked(self.state_dir / "lock"):
            state = self.state()
            records = list(state.get("hosts", {}).values())
            with concurrent.futures.ThreadPoolExecutor(max(1, len(records))) as pool:
                list(pool.map(self._stop, records))
            for record in records:
                self._clean_host(record)
            # Leftover host dirs of a fleet.json lost in a crash: unmount and remove.
            _remove_tree(self.state_dir / "hosts")
            self._teardown_fleet(state)
            # Its keys and its CA open nothing once its hosts are gone; the next fleet gets new ones.
            for path in (self.secrets_file, self.secrets_file.with_name(f".{self.secrets_file.name}.lock")):
                path.unlink(missing_ok=True)
            shutil.rmtree(self.secrets_file.with_name(self.secrets_file.name + ".tls"), ignore_errors=True)
            return sorted(state.get("hosts", {}), key=lambda h: int(h[4:]))

    def _stop(self, record: dict, timeout: float = 15) -> None:
        """SIGTERM to nspawn powers the host off; SIGKILL its init if that hangs."""
        pid, start = record.get("nspawn_pid"), record.get("nspawn_start")
        if _alive(pid, start):
            os.kill(pid, signal.SIGTERM)
        elif _alive(record.get("leader_pid"), record.get("leader_start")):
            # nspawn died (a crash): ask the host's systemd to power off itself,
            # as nspawn would have (SIGRTMIN+4 is systemd's poweroff signal).
            os.kill(record["leader_pid"], signal.SIGRTMIN + 4)
        if not self._wait_gone(record, timeout):
            for key in ("leader", "nspawn"):
                if _alive(record.get(f"{key}_pid"), record.get(f"{key}_start")):
                    os.kill(record[f"{key}_pid"], signal.SIGKILL)
            self._wait_gone(record, 5)

    @staticmethod
    def _wait_gone(record: dict, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(_alive(record.get(f"{k}_pid"), record.get(f"{k}_start"))
                       for k in ("leader", "nspawn")):
                # reap our own child, when it is one, so it leaves no zombie
                with contextlib.suppress(ChildProcessError, TypeError):
                    os.waitpid(record.get("nspawn_pid"), os.WNOHANG)
                return True
            with contextlib.suppress(ChildProcessError, TypeError):
                os.waitpid(record.get("nspawn_pid"), os.WNOHANG)
            time.sleep(0.1)
        return False

    def _clean_host(self, record: dict) -> None:
        for path in _cgroups(record["machine"]):
            for sub in sorted(path.glob("**/"), key=lambda p: len(str(p)), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
        delete_link(veth_of(record["machine"]))
        _remove_tree(Path(record["home"]))

    def _teardown_fleet(self, state: dict) -> None:
        for path in _cgroups(""):  # the empty sglfleet/ parent of the hosts' cgroups
            with contextlib.suppress(OSError):
                path.rmdir()
        bridge = state.get("bridge", self.bridge)  # the one up created, whatever asks now
        if state.get("bridge_created"):
            delete_link(bridge)
        for path in (self.state_file, self.known_hosts, self.ssh_config, self.ssh_key,
                     self.ssh_key.with_suffix(".pub")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
