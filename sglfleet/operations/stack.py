"""Stack operations: fan the wheels out, build the venv offline with uv, verify, collect.

The planning is split into pure functions of the stack and the host's
``StackState`` (``sglfleet.plan.stack_commands``); the operations ask
the fact once each and yield what they return. Wheels cross the controller's
uplink about once: hosts fetch them from each other in rounds (``sglfleet.artifacts.fanout``).

**Example:**

.. code:: python

    stack.installed(name="Install stack", stack=load_stack("dev"), gpu_less=True, keep=1)
"""

from __future__ import annotations

import shlex

import gevent
from pyinfra import host, logger
from pyinfra.api import OperationError, StringCommand, operation

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.fanout import Progress, Share, aria2_command, aria2_input, human, serve
from sglfleet.artifacts.stacks import Stack, StackError
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.facts.host import READ
from sglfleet.facts.stack import StackState, WheelhouseFiles
from sglfleet.host.layout import LAYOUT, STALE_MINUTES
from sglfleet.host.stacks import PATCHED
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.drift import marked
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.stack_commands import build_commands, collect_commands, collected
from sglfleet.run.diffs import first_pass, report_drift, wants_diff
from sglfleet.run.recording import fail

@operation()
def wheels_fanned_out(stack: Stack, share: Share, full_check: bool = False, found=READ,
                      peers_hold: frozenset[str] | None = None):
    """
    Give the host every wheel of ``stack`` it lacks, from the hosts of earlier
    rounds (``aria2c``, several sources a file, sha256 checked on arrival), or
    from the controller in round 0, when no peer answers, or without aria2c;
    then serve them to the later rounds until the stacks are built.

    + stack: a loaded, complete stack
    + share: the host's turn in the fan-out (``sglfleet.artifacts.fanout``)
    + full_check: as ``installed``'s
    + found: ``StackState``'s answer, already read; by default the operation reads it
    + peers_hold: the wheels the share's peers hold (their own Pythons'); the others come
      from the controller at once. None: any wheel may be asked of them

    **Example:**

    .. code:: python

        wheels_fanned_out(name="Wheels, round 1", stack=stack, share=Share(1, ("http://node1:30089",), 30089, "u"))
    """
    state = found if found is not READ else host.get_fact(
        StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version, full=full_check)
    if state.verified:
        host.noop(f"stack {stack.id} is built: no wheel needed")
        return
    present = state.wheels if state.wheels is not None else host.get_fact(WheelhouseFiles)
    try:
        local = wheelhouse.ensure(stack)
    except StackError as e:
        raise OperationError(str(e)) from None
    missing = [f.filename for f in stack.files if present.get(f.filename) != local[f.filename].sha256]
    if not missing:
        host.noop(f"the wheelhouse has every wheel of stack {stack.id}")
        return
    sources = share.sources if state.aria2 else ()
    # A wheel of this host's interpreter alone no peer of another Python has: none is asked for it.
    own = [name for name in missing if peers_hold is not None and name not in peers_hold]
    if share.sources and not state.aria2 and first_pass():
        host.log("aria2c is missing, so the wheels come from the controller: apt install aria2 to fetch "
                 "them from peer hosts", logger.warning)
    if first_pass():
        size = sum(local[name].size for name in missing)
        origin = f"{len(sources)} peer hosts" if sources else "the controller"
        if sources and own:
            origin += f" ({len(own)} only its Python takes from the controller)"
        host.log(f"Stack {stack.id}: {len(missing)} wheels ({human(size)}) from {origin}", logger.info)
    yield HostFunctionCommand(_fetch_and_serve, ([(name, local[name]) for name in missing], sources, share, own), {})


def _fetch_and_serve(state, host, connector_arguments, missing, sources, share: Share, own=()):
    """Fetch ``missing`` (``[(name, Local)]``, ``own`` from the controller alone) into the wheelhouse, then serve it; False fails the host."""
    def run(command: str, **extra):
        return host.run_shell_command(StringCommand(command), **{**connector_arguments, **extra})

    wheelhouse_dir = LAYOUT.wheelhouse
    incoming = f"{wheelhouse_dir}/.incoming-{RUN_TOKEN}"
    # Private to the SSH user, who uploads without sudo, beside the wheelhouse (not /tmp,
    # often RAM): a rename puts a checked file in place. Killed runs' folders go after an hour.
    q_wheelhouse = shlex.quote(wheelhouse_dir)
    ok, output = run(f"mkdir -p {q_wheelhouse} && find {q_wheelhouse} -maxdepth 1 -name '.incoming-*' "
                     f"-mmin +{STALE_MINUTES} -exec rm -rf {{}} + && "
                     f"install -d -m 700 -o \"${{SUDO_USER:-$(id -un)}}\" {shlex.quote(incoming)}")
    if not ok:
        return fail(state, host, f"cannot prepare {incoming}: {' '.join(output.stderr_lines)[-300:]}")
    left = dict(missing)
    asked = {name: entry for name, entry in left.items() if name not in own}
    if sources and asked:
        left = {**{name: left[name] for name in own}, **_from_peers(host, run, asked, sources, incoming)}
    if left and not _from_controller(state, host, connector_arguments, run, left, incoming):
        return False
    run(f"rm -rf {shlex.quote(incoming)}")
    ok, errors = serve(run, share, wheelhouse_dir, LAYOUT.lib)
    if not ok:  # the run goes on: later rounds fetch from other peers, or the controller
        host.log(f"cannot serve wheels to peers on port {share.port}: {' '.join(errors)[-300:]}", logger.warning)
    return True


def _checked_into_place(host, run, names: list[str], incoming: str, local: dict) -> list[str]:
    """Rename each ``<name>.part`` whose sha256 matches into the wheelhouse; the names that did not."""
    # The sums go on stdin: a command line per wheel passes Linux's 128 KiB limit on one
    # argument (MAX_ARG_STRLEN; sudo sh -c takes the script as one) near 150 wheels, and
    # a CUDA stack has 207.
    part = '"$name.part"'
    script = (
        f"cd {shlex.quote(incoming)} && while read -r sum name; do "
        f'if echo "$sum  $name.part" | sha256sum --check --status 2>/dev/null; '
        f"then chown root:root {part} && chmod 644 {part} && mv -f {part} {shlex.quote(LAYOUT.wheelhouse)}/\"$name\"; "
        f'else rm -f {part}; echo "$name"; fi; done'
    )
    ok, output = run(script, _stdin="".join(f"{local[name].sha256} {name}\n" for name in names))
    if not ok:  # not one file was checked: say why, not only that they failed
        host.log(f"cannot check the wheels in {incoming}: {' '.join(output.stderr_lines)[-300:]}", logger.error)
        return list(names)
    return [line for line in output.stdout_lines if line in local]


def _from_peers(host, run, left: dict, sources: tuple[str, ...], incoming: str) -> dict:
    """Fetch what is ``left`` from peers; return what is still missing (to come from the controller)."""
    names = sorted(left)
    total = sum(left[name].size for name in names)
    ok, _ = run(f"cat > {shlex.quote(incoming)}/aria2.input",
                _stdin=aria2_input([(name, left[name].sha256) for name in names], sources))
    progress = Progress(host, f"wheels from {len(sources)} peer hosts", total)
    fetch = gevent.spawn(run, aria2_command(f"{incoming}/aria2.input", incoming))
    while not fetch.ready():
        fetch.join(timeout=progress.every_s)
        if not fetch.ready():
            sizes = run(f"du -sb {shlex.quote(incoming)} 2>/dev/null | cut -f1")[1].stdout_lines
            progress.update(int(sizes[0]) if sizes and sizes[0].isdigit() else 0)
    fetched_ok, output = fetch.value if fetch.successful() else (False, None)
    still = _checked_into_place(host, run, names, incoming, left)
    if still:
        # A corrupt peer file fails its checksum and aria2c tries no other source: the controller sends it.
        why = "" if fetched_ok else f" (aria2c: {' '.join(output.stderr_lines)[-200:] if output else 'failed'})"
        host.log(f"{len(still)} wheels did not come from peers{why}; the controller sends them", logger.warning)
    return {name: left[name] for name in still}


def _from_controller(state, host, connector_arguments, run, left: dict, incoming: str) -> bool:
    """Upload what is ``left`` as the SSH user (sftp cannot sudo), then check and rename it as root."""
    progress = Progress(host, "wheels from the controller", sum(local.size for local in left.values()))
    sent = 0
    for name, local in sorted(left.items()):
        target = f"{incoming}/{name}.part"
        try:
            sftp = host.connector.get_file_transfer_connection()
            with open(local.path, "rb") as handle:
                sftp.putfo(handle, target, callback=lambda done, _total, base=sent: progress.update(base + done))
        except Exception as error:  # noqa: BLE001 - the link, the disk: fail this host with the cause
            return fail(state, host, f"cannot send {name}: {type(error).__name__}: {error}")
        sent += local.size
    corrupted = _checked_into_place(host, run, sorted(left), incoming, left)
    if corrupted:
        return fail(state, host, f"{', '.join(corrupted)} arrived corrupted (sha256 mismatch): run the deploy again")
    return True


@operation()
def installed(stack: Stack, gpu_less: bool = False, keep: int = 1, full_check: bool = False, found=READ,
              sharing: str | None = None, textfile_dir: str = TEXTFILE_DIR, patched: list[str] | tuple = (PATCHED,),
              backends: list[str] | tuple = ()):
    """
    Ensure ``stack`` is built, verified, unchanged since, and in place on the host,
    and old stacks are collected. A stack that changed on the host (its venv
    against the snapshot taken at build time; with ``full_check``, every file
    against its wheel's RECORD) is built again from its lock.

    + stack: a loaded, complete stack (``load_stack``)
    + gpu_less: the host has no GPU; the probe skips the GPU checks and records it
    + keep: stacks kept besides this one and those of the current and previous releases
    + full_check: also read every installed file against its RECORD hash (slow: on request)
    + found: ``StackState``'s answer (wheels not hashed), already read; by default the operation reads it
    + sharing: the unit of the file server this host may have started for peers (``wheels_fanned_out``),
      stopped here, once every round has fetched
    + textfile_dir: node_exporter's textfile folder, where a drift found is marked (``sglfleet_drift``)
    + patched: the files of its sglang the patch step changes (as the wheel names them): no drift
    + backends: the transfer backends of the host's PD services (sglang servers): the probe imports each

    **Example:**

    .. code:: python

        stack.installed(name="Stack dev", stack=load_stack("dev"), gpu_less=True)
    """
    # The wheels are in place by now (wheels_fanned_out): hashing them again would cost
    # seconds a GB on every build and decide nothing here.
    state = found if found is not READ else host.get_fact(
        StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version,
        hash_wheels=False, full=full_check, patched=tuple(patched))
    commands = []
    hashes = None
    if state.built and state.drift:
        report_drift("stack", f"stack {stack.id}", state.drift, "will build it again from its lock, then restart "
                     "the release that serves from it behind its gate")
        commands.append(marked("stack", textfile_dir))
    if not state.verified:
        try:
            # Fetched once for all hosts; bytes that differ from the lock stop the
            # run here, while planning, before any host is changed.
            local = wheelhouse.ensure(stack)
        except StackError as e:
            raise OperationError(str(e)) from None
        hashes = {name: entry.sha256 for name, entry in local.items()}
        commands += build_commands(stack, state, gpu_less, hashes, patched, backends)
        summary = [f"  + build and verify {stack.path}"]
    else:
        summary = []
    if sharing:
        # Every round has fetched by now: this host's file server is done.
        commands.append(f"systemctl stop {shlex.quote(sharing)} 2>/dev/null || true")
    commands += collect_commands(stack, state, keep)
    if collected(stack, state, keep):
        summary.append(f"  - collect {', '.join(collected(stack, state, keep))}")
    if summary and wants_diff():
        # No file diff fits a venv; say what would change instead.
        host.log_styled("\n".join([f"Stack {stack.id}:", *summary]), fg="yellow")
    if not commands:
        host.noop(f"stack {stack.id} is built and verified, nothing to collect")
    yield from commands


@operation()
def collected_after_rollout(stack: Stack, keep: int = 1, switched: bool = False):
    """
    Collect the stacks this run's rollout left unused, read again once it is over:
    a switch makes the release that served ``previous``, so the release that was
    ``previous`` before, and perhaps its stack, is no longer kept. Left to the
    next converge, that collection would be a change in a run that should make
    none; a retired service's releases go with it too. Nothing (not even a read)
    where no service of the host switched or was retired.

    + stack: the host's stack (``host_stack``)
    + keep: how many unused stacks beside it to keep (``stacks_keep``)
    + switched: whether this run's rollout switches, restarts or retires a service of the host

    **Example:**

    .. code:: python

        collected_after_rollout(name="Stacks no release keeps, collected", stack=stack, keep=1, switched=True)
    """
    if not switched:
        host.noop("no switch this run: the stacks in use are as they were read")
        return
    yield HostFunctionCommand(_collect_unused, (stack, keep), {})


def _collect_unused(state, host, connector_arguments, stack: Stack, keep: int) -> bool:
    """Read the host's stacks and releases as they are now, then remove what no release keeps."""
    fact = StackState()
    ok, output = host.run_shell_command(StringCommand(fact.command(stack.id, stack.python, "", hash_wheels=False)),
                                        **connector_arguments)
    if not ok:
        return False
    found = fact.process(output.stdout_lines)
    for command in collect_commands(stack, found, keep):
        if not host.run_shell_command(StringCommand(command), **connector_arguments)[0]:
            return False
    doomed = collected(stack, found, keep)
    if doomed:
        host.log(f"collected {', '.join(doomed)}: no release keeps them since this run's rollout", logger.info)
    return True


@operation()
def fits(problems: list[str]):
    """
    Fail the host when preflight found problems, printing each; nothing otherwise.

    + problems: one line each, from ``sglfleet.plan.preflight.check``

    **Example:**

    .. code:: python

        stack.fits(name="Preflight", problems=check(host.name, stack, gpus, ...))
    """
    if not problems:
        host.noop("preflight passed")
        return
    yield " ; ".join([*(f"echo {shlex.quote(p)} >&2" for p in problems), "exit 1"])
