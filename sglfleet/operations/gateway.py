"""
The gateway operation: a gateway host runs the configuration its files describe,
restarted one gateway at a time.

The running process carries its configuration's digest (``GatewayService``), so
a converge after a run that was killed between writing the files and the
restart still restarts it, and a converge that changes nothing restarts nothing.

**Example:**

.. code:: python

    gateway.serving(name="sglang-gateway.service serves", digest="9c41d0e2a7b35f18",
                    earlier=("gw1",), found=host_state(host).gateway)
"""

from __future__ import annotations

import posixpath
import shlex

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from sglfleet.facts.gateway import GatewayService
from sglfleet.facts.host import READ
from sglfleet.facts.release import InstalledServices
from sglfleet.host.layout import GATEWAY, LAYOUT
from sglfleet.host.textfile import DEFAULT_DIR as TEXTFILE_DIR, FILE as TEXTFILE, file_name as textfile_name
from sglfleet.operations.remote import HostFunctionCommand
from sglfleet.controller.outcomes import fail, passed, retired
from sglfleet.operations.output import say


@operation()
def serving(digest: str, earlier: tuple[str, ...] = (), unit: str = GATEWAY.unit, found=READ):
    """
    Ensure the host's gateway runs configuration ``digest``: (re)start it once every
    gateway before it came back, and wait until it routes again.

    + digest: the configuration's digest (``sglfleet.plan.host_files.GatewayFiles.digest``)
    + earlier: the gateways restarted before this one in this run: one of them down stops this restart
    + unit: the gateway's unit
    + found: ``GatewayService``'s answer, already read (``sglfleet.facts.host``); by default the operation reads it

    **Example:**

    .. code:: python

        serving(name="Gateway serves", digest="9c41d0e2a7b35f18")
    """
    if found is READ:
        found = host.get_fact(GatewayService, unit=unit, runtime_dir=GATEWAY.runtime_dir)
    if found["active"] == "active" and found["config"] == digest:
        host.noop(f"{unit} runs configuration {digest}")
        return
    why = (f"{found['active']}" if found["active"] != "active"
           else f"runs configuration {found['config'] or 'unknown'}, not {digest}")
    say(f"Will restart {unit} ({why}), one gateway at a time")
    yield HostFunctionCommand(_restart, (unit, digest, earlier), {})


@operation()
def sglang_retired(installed=READ, textfile_dir: str = TEXTFILE_DIR):
    """
    Ensure a gateway host runs no sglang: each service a host ran before it joined the
    group gateways is stopped and removed, with its env file, links, releases and
    series in node_exporter's textfile folder.

    + installed: the services of ``InstalledServices``'s answer, already read; by default the operation reads it
    + textfile_dir: node_exporter's textfile folder

    **Example:**

    .. code:: python

        sglang_retired(name="No sglang on a gateway host")
    """
    if installed is READ:
        installed = host.get_fact(InstalledServices).services
    if not installed:
        host.noop("no sglang service on this gateway host")
        return
    layouts = [LAYOUT.for_service(name) for name in installed]
    units = ", ".join(layout.unit for layout in layouts)
    say(f"Will stop and remove {units}: this host is in group gateways now")
    # Not the host tool's retire: a gateway host's tool is not updated any more (tasks/service.py
    # skips gateways), so one from before retire existed may be all it has.
    for layout in layouts:
        yield f"systemctl disable --now {shlex.quote(layout.unit)} 2>/dev/null || true"
        yield shlex.join(["rm", "-rf", "--", layout.unit_file, layout.env_file, layout.current, layout.previous,
                          layout.own_root,
                          posixpath.join(textfile_dir, textfile_name(layout))])
    yield shlex.join(["rm", "-f", "--", posixpath.join(textfile_dir, TEXTFILE)])  # and the host's series
    yield "systemctl daemon-reload"
    yield FunctionCommand(retired, ([layout.service_name for layout in layouts], "the host is in group gateways"), {})


@operation()
def gateway_retired(installed=READ, unit: str = GATEWAY.unit):
    """
    Ensure a host outside the group gateways runs no gateway: a host that was one has
    its ``sglang-gateway.service`` stopped and removed, with its env file and launcher.
    Its clients must have moved to another gateway first: this one stops answering.

    + installed: whether ``InstalledServices`` found sglfleet's gateway unit; by default the operation reads it
    + unit: the gateway's unit

    **Example:**

    .. code:: python

        gateway_retired(name="No gateway outside group gateways")
    """
    if installed is READ:
        installed = host.get_fact(InstalledServices).gateway
    if not installed:
        host.noop(f"no {unit} on this host")
        return
    say(f"Will stop and remove {unit}: this host is no longer in group gateways", logger.warning)
    yield f"systemctl disable --now {shlex.quote(unit)} 2>/dev/null || true"
    yield shlex.join(["rm", "-f", "--", GATEWAY.unit_file, GATEWAY.env_file, GATEWAY.gateway_launcher])
    yield "systemctl daemon-reload"
    yield FunctionCommand(retired, (["gateway"], "the host is no longer in group gateways"), {})


def _restart(state, host, connector_arguments, unit: str, digest: str, earlier: tuple[str, ...]):
    """Restart the gateway (``Type=notify``: systemctl returns once it routes); False fails the host."""
    down = [name for name in earlier if name in {h.name for h in state.failed_hosts}]
    if down:
        return fail(state, host, f"{unit} not restarted: gateway {', '.join(down)} did not come back, and two "
                             f"gateways are never down together; fix it, then run again")
    q_unit = shlex.quote(unit)
    ok, output = host.run_shell_command(
        StringCommand(f"systemctl daemon-reload && systemctl enable --quiet {q_unit} && systemctl restart {q_unit}"),
        **connector_arguments)
    if not ok:
        _, journal = host.run_shell_command(
            StringCommand(f"journalctl -u {q_unit} -n 8 --no-pager -o cat"), **connector_arguments)
        why = " ".join(output.stderr_lines)[-300:] or "systemctl restart failed"
        return fail(state, host, f"{unit} did not come back: {why}; its journal: {' | '.join(journal.stdout_lines)[-600:]}")
    host.log(f"{unit} restarted and routes (configuration {digest})", logger.info)
    return passed(state, host, f"gateway serves configuration {digest}", "GatewayRestarted",
                  f"{unit} restarted with configuration {digest}")
