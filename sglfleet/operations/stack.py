"""Stack operations: fan the wheels out, build the venv offline with uv, verify, collect.

Each operation takes the host's ``StackState`` (read once, or the host read's answer),
compares it with the stack, and yields commands or ``host.noop``. Pure functions plan
the commands (``sglfleet.plan.stack_commands``); what the controller runs during the
run is yielded as a ``HostFunctionCommand``: the wheels' transfer
(``sglfleet.controller.wheel_transfer``) and the collection once a rollout is over
(``sglfleet.controller.stack_collection``). No operation fetches a wheel: the task passes
the stack's files in the controller's wheelhouse (``sglfleet.controller.wheels.host_wheels``),
fetched and checked against the lock while the deploy is planned, so bytes that differ
stop the run before any host changes. Wheels cross the controller's uplink about once:
hosts fetch them from each other in rounds (``sglfleet.artifacts.fanout``).

**Example:**

.. code:: python

    stack.installed(name="Install stack", stack=stack, wheels=host_wheels(stack), gpu_less=True, keep=1)
"""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import operation

from sglfleet.artifacts.fanout import Share, human
from sglfleet.artifacts.stacks import Stack
from sglfleet.artifacts.wheelhouse import Local
from sglfleet.facts.host import READ
from sglfleet.facts.stack import StackState, WheelhouseFiles
from sglfleet.host.stacks import PATCHED
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR
from sglfleet.operations.drift import found as found_drift, marked
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.plan.stack_commands import build_commands, collect_commands, collected
from sglfleet.operations.output import say, wants_diff
from sglfleet.controller.stack_collection import collect_unused
from sglfleet.controller.wheel_transfer import fetch_and_serve


@operation()
def wheels_fanned_out(stack: Stack, share: Share, wheels: dict[str, Local], full_check: bool = False, found=READ,
                      peers_hold: frozenset[str] | None = None):
    """
    Give the host every wheel of ``stack`` it lacks, from the hosts of earlier
    rounds (``aria2c``, several sources a file, sha256 checked on arrival), or
    from the controller in round 0, when no peer answers, or without aria2c;
    then serve them to the later rounds until the stacks are built.

    + stack: a loaded, complete stack
    + share: the host's turn in the fan-out (``sglfleet.artifacts.fanout``)
    + wheels: the stack's files in the controller's wheelhouse, ``{filename: Local}``, checked
      against the lock while the deploy was planned (``sglfleet.controller.wheels.host_wheels``)
    + full_check: as ``installed``'s
    + found: ``StackState``'s answer, already read; by default the operation reads it
    + peers_hold: the wheels the share's peers hold (their own Pythons'); the others come
      from the controller at once. None: any wheel may be asked of them

    **Example:**

    .. code:: python

        wheels_fanned_out(name="Wheels, round 1", stack=stack, share=Share(1, ("http://node1:30089",), 30089, "u"),
                          wheels=host_wheels(stack))
    """
    state = found if found is not READ else host.get_fact(
        StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version, full=full_check)
    if state.verified:
        host.noop(f"stack {stack.id} is built: no wheel needed")
        return
    present = state.wheels if state.wheels is not None else host.get_fact(WheelhouseFiles)
    missing = [f.filename for f in stack.files if present.get(f.filename) != wheels[f.filename].sha256]
    if not missing:
        host.noop(f"the wheelhouse has every wheel of stack {stack.id}")
        return
    sources = share.sources if state.aria2 else ()
    # A wheel of this host's interpreter alone no peer of another Python has: none is asked for it.
    own = [name for name in missing if peers_hold is not None and name not in peers_hold]
    if share.sources and not state.aria2:
        say("aria2c is missing, so the wheels come from the controller: apt install aria2 to fetch "
            "them from peer hosts", logger.warning)
    origin = f"{len(sources)} peer hosts" if sources else "the controller"
    if sources and own:
        origin += f" ({len(own)} only its Python takes from the controller)"
    say(f"Stack {stack.id}: {len(missing)} wheels ({human(sum(wheels[name].size for name in missing))}) from {origin}")
    yield HostFunctionCommand(fetch_and_serve, ([(name, wheels[name]) for name in missing], sources, share, own), {})


@operation()
def installed(stack: Stack, wheels: dict[str, Local], gpu_less: bool = False, keep: int = 1, full_check: bool = False,
              found=READ, sharing: str | None = None, textfile_dir: str = TEXTFILE_DIR,
              patched: list[str] | tuple = (PATCHED,), backends: list[str] | tuple = ()):
    """
    Ensure ``stack`` is built, verified, unchanged since, and in place on the host,
    and old stacks are collected. A stack that changed on the host (its venv
    against the snapshot taken at build time; with ``full_check``, every file
    against its wheel's RECORD) is built again from its lock.

    + stack: a loaded, complete stack (``load_stack``)
    + wheels: the stack's files in the controller's wheelhouse, ``{filename: Local}``, checked
      against the lock while the deploy was planned (``sglfleet.controller.wheels.host_wheels``): a build's
      requirements take their sha256 where an allowed unhashed lock has none
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

        stack.installed(name="Stack dev", stack=stack, wheels=host_wheels(stack), gpu_less=True)
    """
    # The wheels are in place by now (wheels_fanned_out): hashing them again would cost
    # seconds a GB on every build and decide nothing here.
    state = found if found is not READ else host.get_fact(
        StackState, stack_id=stack.id, python=stack.python, uv_version=stack.uv.version,
        hash_wheels=False, full=full_check, patched=tuple(patched))
    commands = []
    if state.built and state.drift:
        commands.append(found_drift("stack", f"stack {stack.id}", state.drift, "will build it again from its lock, "
                                    "then restart the release that serves from it behind its gate"))
        commands.append(marked("stack", textfile_dir))
    if not state.verified:
        hashes = {name: entry.sha256 for name, entry in wheels.items()}
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
def collected_after_rollout(stack: Stack, keep: int = 1):
    """
    Collect the stacks this run's rollout left unused, read again once it is over:
    a switch makes the release that served ``previous``, so the release that was
    ``previous`` before, and perhaps its stack, is no longer kept. Left to the
    next converge, that collection would be a change in a run that should make
    none; a retired service's releases go with it too. For a host whose rollout
    switches, restarts or retires a service: elsewhere the task calls it not at all.

    + stack: the host's stack (``host_stack``)
    + keep: how many unused stacks beside it to keep (``stacks_keep``)

    **Example:**

    .. code:: python

        collected_after_rollout(name="Stacks no release keeps, collected", stack=stack, keep=1)
    """
    yield HostFunctionCommand(collect_unused, (stack, keep), {})


@operation()
def fits(problems: list[str]):
    """
    Fail the host when preflight found problems, printing each (a host that fits needs no call).

    + problems: one line each, from ``sglfleet.plan.preflight.check``

    **Example:**

    .. code:: python

        stack.fits(name="Preflight", problems=check(host.name, stack, gpus, ...))
    """
    if not problems:
        host.noop("preflight passed")
        return
    yield " ; ".join([*(f"echo {shlex.quote(p)} >&2" for p in problems), "exit 1"])
