"""
Compile caches handed on during a rollout: the first host of a stack, GPU
architecture and driver to pass its gate (the canary, mostly) packs its
compile caches, while still out of the router, and serves them; each later
host of the same key fetches them before its restart, from every host that
holds them by then (so the sources double, batch by batch), and serves them
in turn. Hosts of another key never get them (``sglfleet.host.compile_cache``
checks the key again on the host). A fetch that fails, or an archive the host
refuses, leaves the host to compile cold; a host whose gate fails after it
took caches from peers drops them and tries once more, cold.

The run's offers (which key is packed, its sha256, who serves it) are kept
in the run's record (``sglfleet.record.run``), which each function is given first.

**Example:**

.. code:: python

    share = CacheShare(key="dev-0a24+cpu", stack_id="dev-0a24", port=30091,
                       unit="sglfleet-compile-share-3f2a", later=True)
    warmed = take(run, host, connector_arguments, step.label, share)   # before the switch
"""

from __future__ import annotations

import shlex

import gevent
from pyinfra import logger
from pyinfra.api import StringCommand

from sglfleet.artifacts.fanout import Share, human, serve
from sglfleet.host.layout import LAYOUT
from sglfleet.host.protocol import PASSED, results as tool_results
from sglfleet.plan.rollout_steps import CacheShare
from sglfleet.record.events import emit
from sglfleet.record.run import Offer, RunRecord

CACHE_TOOL_TIMEOUT_S = 1800  # packing or fetching some GB of caches; past that the link is gone


def _cache_tool(host, connector_arguments, share: CacheShare, timeout_s: float | None,
                *args: str) -> tuple[int | None, dict, list[str]]:
    """
    Run ``sglfleet-release [--service NAME] cache ARGS`` for the share's service: its exit status
    (None: no answer within ``timeout_s``, the step's bound on a host's answer), its result record, its errors.
    """
    command = StringCommand(shlex.join([LAYOUT.tool, *LAYOUT.for_service(share.service).tool_args, "cache", *args])
                            + "; echo sglfleet-exit=$? >&2")
    try:
        with gevent.Timeout(timeout_s or CACHE_TOOL_TIMEOUT_S, TimeoutError):
            _, output = host.run_shell_command(command, **connector_arguments)
    except Exception as error:  # a lost link: what is at stake is a warm start, not the host
        return None, {}, [f"{type(error).__name__}: {error}"]
    lines = output.stderr_lines
    said = lines.pop().partition("=")[2] if lines and lines[-1].startswith("sglfleet-exit=") else ""
    found = tool_results(output.stdout_lines)
    return (int(said) if said.isdigit() else None), (found[-1] if found else {}), lines


def _url(host, share: CacheShare) -> str:
    return f"http://{host.data.get('ssh_hostname') or host.name}:{share.port}"


def take(run: RunRecord, host, connector_arguments, label: str, share: CacheShare | None,
         timeout_s: float | None = None) -> bool:
    """
    Before the host's switch: fetch and unpack the caches an earlier host of its key
    offers in this run. Whether the host took any files; a failure only warns (it starts cold).
    """
    offer = run.offers.get(share.key) if share else None
    if offer is None or not offer.sources:
        return False
    status, result, errors = _cache_tool(host, connector_arguments, share, timeout_s, "fetch", share.stack_id,
                                         "--key", share.key, "--sha256", offer.sha256,
                                         *[f"--peer={url}" for url in offer.sources])
    if status != PASSED:
        why = " ".join(errors)[-300:] or f"exit status {status}"
        host.log(f"{label}: compile caches from peers not used, it compiles cold: {why}", logger.warning)
        return False
    line = (f"{label}: compile caches of {share.key} from {len(offer.sources)} peer(s), {human(offer.size)}: "
            f"{result.get('imported', 0)} files added, {result.get('kept', 0)} kept"
            + (" (taken in an earlier run)" if result.get("already") else ""))
    host.log(line, logger.info)
    emit(run, "CompileCachesTaken", host=host.name, message=line,
         figures={"files": result.get("imported", 0), "kept": result.get("kept", 0), "bytes": offer.size,
                  "peers": len(offer.sources)})
    return bool(result.get("imported"))


def hand_on(run: RunRecord, host, connector_arguments, label: str, share: CacheShare | None, took: bool,
            timeout_s: float | None = None) -> None:
    """
    Once the host passed its gate, still drained: pack its caches where none of its key
    are offered yet, or serve the ones it took; only where a later host of its key restarts.
    """
    if share is None or not share.later:
        return
    offers = run.offers
    offer = offers.get(share.key)
    if offer is None:
        status, result, errors = _cache_tool(host, connector_arguments, share, timeout_s, "pack", share.stack_id)
        if status != PASSED or not result.get("packed"):
            if errors:
                host.log(f"{label}: compile caches not packed for later hosts: {' '.join(errors)[-300:]}",
                         logger.warning)
            return
        offer = offers.setdefault(share.key, Offer(result["sha256"], result["bytes"]))
        if offer.sha256 != result["sha256"]:
            return  # a host of the same batch packed first: later hosts take its archive
        line = (f"{label}: compile caches packed for later hosts of {share.key}: {result['files']} files, "
                f"{human(result['bytes'])}")
        host.log(line, logger.info)
        emit(run, "CompileCachesPacked", host=host.name, message=line,
             figures={"files": result["files"], "bytes": result["bytes"]})
    elif not took:
        return  # it holds its own caches, not the offered archive
    # A run whose host failed never stopped its server (it ends by RuntimeMaxSec): it holds the port.
    stale = f"systemctl stop {shlex.quote(share.unit.rsplit('-', 1)[0] + '-*')} 2>/dev/null; "
    try:
        with gevent.Timeout(timeout_s or CACHE_TOOL_TIMEOUT_S, TimeoutError):
            ok, errors = serve(lambda command: host.run_shell_command(StringCommand(stale + command),
                                                                      **connector_arguments),
                               Share(round=0, sources=(), port=share.port, unit=share.unit, serve_s=share.serve_s),
                               LAYOUT.compile_archives, LAYOUT.lib)
    except Exception as error:  # a lost link: the host's gate passed, which is what counts
        ok, errors = False, [f"{type(error).__name__}: {error}"]
    if ok:
        offer.sources.append(_url(host, share))
    else:
        host.log(f"{label}: cannot serve compile caches on port {share.port}: {' '.join(errors)[-300:]}",
                 logger.warning)


def drop(run: RunRecord, host, connector_arguments, label: str, share: CacheShare, timeout_s: float | None = None) -> None:
    """Take out the caches the host took from peers: its next start compiles cold."""
    status, result, errors = _cache_tool(host, connector_arguments, share, timeout_s, "drop", share.stack_id)
    host.log(f"{label}: gate failed with the compile caches from peers: {result.get('dropped', 0)} files "
             f"dropped, once more cold" if status == PASSED else
             f"{label}: the compile caches from peers could not be dropped: {' '.join(errors)[-300:]}",
             logger.warning)
