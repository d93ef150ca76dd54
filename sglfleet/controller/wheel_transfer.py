"""
A host's wheels as the controller moves them, during the run: from the peers of earlier
rounds (``aria2c``, several sources a file, sha256 checked on arrival), else from the
controller over the operation's own connection, then served to the later rounds.

``sglfleet.operations.stack.wheels_fanned_out`` decides which wheels a host lacks and
where they may come from; ``fetch_and_serve`` is what it yields (``HostFunctionCommand``).
Files arrive in a folder of this run's beside the wheelhouse and are renamed into it
only once their sha256 matches the lock; one that does not is fetched again from the
controller, or fails the host.

**Example:**

.. code:: python

    yield HostFunctionCommand(fetch_and_serve, ([(name, local[name]) for name in missing],
                                                share.sources, share, own), {})
"""

from __future__ import annotations

import shlex

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglfleet.artifacts.fanout import Progress, Share, aria2_command, aria2_input, serve
from sglfleet.artifacts.temporaries import RUN_TOKEN
from sglfleet.host.layout import LAYOUT, STALE_MINUTES
from sglfleet.controller.outcomes import fail


def fetch_and_serve(state, host, connector_arguments, missing, sources, share: Share, own=()):
    """
    Fetch ``missing`` into the host's wheelhouse, then serve it to the later rounds;
    False fails the host.

    + missing: ``[(filename, Local)]``, the controller's entries of the wheels the host lacks
    + sources: the peers' base URLs to fetch from (none: the controller sends every wheel)
    + share: the host's turn in the fan-out, with the port and unit it serves on
    + own: the wheels no peer holds (the host's own Python's): from the controller alone
    """
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
