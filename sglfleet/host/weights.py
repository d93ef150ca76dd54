"""
A new model revision served in place: the host tool's ``update RELEASE``, no restart.

The controller plans a change as weights-only (``sglfleet.plan.weights``); here, under the host's
lock, the tool checks it again on what the host holds (the two releases' files differ in the
model's folder alone, and the two folders' ``config.json`` are one model as sglang reads it), then
asks the running server to load the new folder (``POST /update_weights_from_disk``, with
``weight_version`` the revision and the admin key where the env file has one: the route is
``ADMIN_OPTIONAL``, 0.5.9 ``srt/entrypoints/http_server.py:914-915``, ``utils/auth.py:121-133``).

Requests in flight are not drained: sglang's update waits for them behind its model-update lock,
they end on the old weights, and the requests that come meanwhile wait and are served on the new
(0.5.9 ``tokenizer_manager.py:513, 1347-1377``; 0.5.14 on an H200: a 512-token stream finished,
the update answered 21 ms after its last event, a request sent meanwhile got the new weights).

Then the gate, as after a restart: the unit did not restart (its main process and start time are
the same), the server says the new ``weight_version`` and path, and the start-up gate's generations
pass. ``current`` points at the new release (a later restart starts it), and the release's
``verdict.json`` records the update (``in_place``: the process, its start, the release it came
from), so the host's read says the process serves the new release (``served_in_place``) and a
second converge changes nothing. A failure updates the server back to the release it served;
where the server no longer answers (it died loading), the old release is restarted behind its gate.

**Example:**

.. code:: shell

    sglfleet-release update 9c41d0e2a7b35f18   # exit 0: serves it in place; 1: back on the old one; 8: not weights-only
"""

from __future__ import annotations

import json
import os
import sys
import time

from . import releases, service
from .client import api_key, base_url, request
from .gate import GateFailed, GateSettings, startup
from .layout import Layout
from .protocol import DOWN, NOT_IN_PLACE, PASSED, ROLLED_BACK, USAGE, result_line

MODEL_FLAG = "--model-path"
# A safetensors file opens with its header's length, 8 bytes little-endian, then the header (JSON).
HEADER_LENGTH = 8
# What config.json says of a checkpoint and not of the model sglang builds from it.
NOT_THE_MODEL = ("_name_or_path", "_commit_hash", "transformers_version")


def served_in_place(record: dict | None, main_pid, since) -> bool:
    """
    Whether an ``in_place`` record (a release's ``verdict.json``) is of the unit's running process:
    the same main process, started at the same time.

    + record: ``verdict.json``'s ``in_place``, or None
    + main_pid, since: the unit's ``MainPID`` and ``ActiveEnterTimestamp`` now
    """
    return (isinstance(record, dict) and str(main_pid or "0") not in ("", "0")
            and str(record.get("pid")) == str(main_pid) and record.get("since") == since)


def serving(layout: Layout) -> str | None:
    """
    The release the unit's running process serves: the one it was started from (its environment),
    or the current one where its weights were updated to it in place since.
    """
    unit = service.properties(layout)
    started = service.main_pid_environ(layout).get("SGLFLEET_RELEASE")
    current = releases.release_id_of(layout.current)
    if current and current != started:
        record = (releases.read(current, "verdict.json", layout, default={}) or {}).get("in_place")
        if served_in_place(record, unit.get("MainPID"), unit.get("ActiveEnterTimestamp")):
            return current
    return started


def served_revision(release_id: str | None, layout: Layout) -> str | None:
    """The model revision a release serves: its staged folder's name (None for a model served by name)."""
    path = model_path(releases.read(release_id, "release.json", layout) or {}) if release_id else None
    return os.path.basename(path.rstrip("/")) if path and path.startswith("/") else None


def model_path(release: dict) -> str | None:
    """The model folder a release's ``release.json`` launches with."""
    args = release.get("args") or []
    return next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == MODEL_FLAG), None)


def the_model(config: dict) -> dict:
    """``config.json`` as sglang builds the model from it: what only names the checkpoint left out."""
    return {key: the_model(value) if isinstance(value, dict) else value
            for key, value in config.items() if key not in NOT_THE_MODEL}


def tensors(path: str) -> dict[str, tuple[str, tuple]]:
    """
    Every tensor of a checkpoint folder's safetensors files, ``{name: (dtype, shape)}``, from their
    headers alone (a few KiB read per shard).

    + path: the model folder

    **Example:** ``tensors("/opt/sglfleet/models/org/tiny/5d83e5")["lm_head.weight"] == ("F32", (256, 64))``
    """
    found = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            with open(os.path.join(path, name), "rb") as shard:
                length = int.from_bytes(shard.read(HEADER_LENGTH), "little")
                header = json.loads(shard.read(length))
            found.update({tensor: (info["dtype"], tuple(info["shape"]))
                          for tensor, info in header.items() if tensor != "__metadata__"})
    return found


def weights_only(old: str, new: str, layout: Layout) -> tuple[str, str] | str:
    """
    ``(model folder, revision)`` of ``new`` where it differs from ``old`` in its weights alone,
    else why not, in a few words.
    """
    before, after = (releases.read(one, "release.json", layout) or {} for one in (old, new))
    old_path, new_path = model_path(before), model_path(after)
    if not old_path or not new_path or old_path == new_path:
        return "its model folder does not change"
    for name in ("launch", "launch.args"):
        try:
            with open(layout.release(old, name)) as a, open(layout.release(new, name)) as b:
                if a.read().replace(old_path, new_path) != b.read():
                    return f"its {name} changes beyond the model's folder"
        except OSError as error:
            return f"{name} does not read: {error.strerror}"
    configs = []
    for path in (old_path, new_path):
        try:
            with open(os.path.join(path, "config.json")) as handle:
                configs.append(the_model(json.load(handle)))
        except (OSError, ValueError) as error:
            return f"{path}/config.json does not read: {error}"
    if configs[0] != configs[1]:
        keys = sorted(k for k in set(configs[0]) | set(configs[1]) if configs[0].get(k) != configs[1].get(k))
        return f"config.json differs ({', '.join(keys[:4])})"
    # sglang loads the new tensors into the running model's parameters: one of another shape kills
    # the server (its rollback reads the same new folder again), so the shapes are checked first.
    try:
        shapes = [tensors(path) for path in (old_path, new_path)]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"the safetensors headers do not read: {error}"
    changed = sorted(name for name in set(shapes[0]) | set(shapes[1]) if shapes[0].get(name) != shapes[1].get(name))
    if changed:
        return f"the tensors' shapes differ ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})"
    return new_path, os.path.basename(new_path.rstrip("/"))


def admin_key(layout: Layout) -> str | None:
    """The key the route takes: the engine's admin key where its env file has one, else its API key."""
    return api_key(layout, "SGLANG_ADMIN_API_KEY") or api_key(layout)


def load(base: str, path: str, version: str, layout: Layout, timeout: float) -> tuple[int, str]:
    """``POST /update_weights_from_disk``: ``(status, text)``, 0 when the server closed it unanswered."""
    return request(f"{base}/update_weights_from_disk", {"model_path": path, "weight_version": version},
                   timeout=timeout, key=admin_key(layout))


def gate(release: dict, settings: GateSettings, unit: dict, path: str, version: str, layout: Layout) -> dict:
    """The gate after an update: the same process, the new weights said, then the start-up gate's checks."""
    def same_process():
        now = service.properties(layout)
        if (now.get("MainPID"), now.get("ActiveEnterTimestamp")) != (unit.get("MainPID"), unit.get("ActiveEnterTimestamp")):
            raise GateFailed("unit", f"{layout.unit} restarted during the update (main process "
                                     f"{unit.get('MainPID')} -> {now.get('MainPID')})")

    same_process()
    status, text = request(f"{base_url(release)}/model_info", timeout=10.0, key=api_key(layout))
    try:
        info = json.loads(text) if status == 200 else {}
    except ValueError:
        info = {}
    if (info.get("weight_version"), info.get("model_path")) != (version, path):
        raise GateFailed("weights", f"/model_info says weight_version {info.get('weight_version')!r} of "
                                    f"{info.get('model_path')!r}, not {version!r} of {path!r}")
    figures = startup(release, settings, int(unit.get("NRestarts") or 0), layout)
    same_process()
    return figures


def back(failed: str, failure: Exception, old: str, old_previous: str | None, layout: Layout) -> int:
    """
    After a failed update: the server loads the old release's weights again (in place), or where it
    no longer answers, the old release restarts behind its gate. The links point as they were.
    """
    releases.point(layout.current, old)
    releases.point(layout.previous, old_previous)
    release = releases.read(old, "release.json", layout) or {}
    settings = GateSettings.load(old, layout)
    unit = service.properties(layout)
    path = model_path(release)
    after = None
    if unit.get("ActiveState") == "active" and request(f"{base_url(release)}/model_info", timeout=10.0,
                                                       key=api_key(layout))[0] == 200:
        version = os.path.basename(path.rstrip("/"))
        status, text = load(base_url(release), path, version, layout, settings.warmup_s)
        if status == 200:
            releases.record(old, "in_place", {"pid": unit.get("MainPID"), "since": unit.get("ActiveEnterTimestamp"),
                                              "from": failed, "model_path": path, "weight_version": version}, layout)
            try:
                gate(release, settings, unit, path, version, layout)
                after, status = f"updated back to {old} in place, which serves again", ROLLED_BACK
            except GateFailed as second:
                after = f"updated back to {old} in place, which does not serve ({second}); restarting it"
    if after is None or not after.endswith("serves again"):
        try:
            startup(release, settings, service.restart(layout), layout)
            after, status = f"{after + '; ' if after else ''}restarted {old}, which serves again", ROLLED_BACK
        except GateFailed as second:
            after, status = f"restarted {old}, which does not serve either ({second})", DOWN
    print(f"in-place update to {failed} failed: {failure}; {after}\nlast log lines of {layout.unit}:\n"
          f"{service.journal_tail(layout)}", file=sys.stderr, flush=True)
    return status


def update(target: str, layout: Layout) -> int:
    """``sglfleet-release update RELEASE``: serve ``target`` by loading its weights into the running server."""
    if not releases.staged(target, layout) or not releases.matches_id(target, layout):
        print(f"release {target} is not staged under {layout.releases}, or no longer matches its id",
              file=sys.stderr, flush=True)
        return USAGE
    old, old_previous = releases.release_id_of(layout.current), releases.release_id_of(layout.previous)
    unit = service.properties(layout)
    if old == target and serving(layout) == target and unit.get("ActiveState") == "active":
        print(f"release {target} already serving")
        print(result_line(stage="startup", release=target, passed=True, figures={}, already=True, in_place=True))
        return PASSED
    why = ("the unit is not active" if unit.get("ActiveState") != "active" else None) or (
        f"the process does not serve the current release {old}" if not old or serving(layout) != old else None)
    change = why or weights_only(old, target, layout)
    if isinstance(change, str):
        print(f"not an update in place on this host: {change}; switch to {target} instead", file=sys.stderr, flush=True)
        return NOT_IN_PLACE
    path, version = change
    release = releases.read(target, "release.json", layout)
    settings = GateSettings.load(target, layout)
    releases.record(target, "switched", {"current": old, "previous": old_previous, "in_place": True}, layout)
    started = time.monotonic()
    status, text = load(base_url(release), path, version, layout, settings.warmup_s)
    took = round(time.monotonic() - started, 3)
    try:
        if status != 200:
            raise GateFailed("update", f"/update_weights_from_disk answered {status or text[:200]}"
                             + (" (the server closed the connection: did it die loading?)" if not status else ""))
        releases.point(layout.current, target)
        releases.point(layout.previous, old)
        releases.record(target, "in_place", {"pid": unit.get("MainPID"), "since": unit.get("ActiveEnterTimestamp"),
                                             "from": old, "model_path": path, "weight_version": version,
                                             "seconds": took}, layout)
        figures = {**gate(release, settings, unit, path, version, layout), "update_s": took}
    except GateFailed as failure:
        releases.record(target, "startup", {"passed": False, "failure": str(failure), "in_place": True}, layout)
        print(result_line(stage="startup", release=target, passed=False, failure=str(failure), in_place=True))
        return back(target, failure, old, old_previous, layout)
    releases.record(target, "startup", {"passed": True, "figures": figures, "in_place": True}, layout)
    print(f"release {target} serves in place ({version}), and passed its gate")
    print(result_line(stage="startup", release=target, passed=True, figures=figures, in_place=True), flush=True)
    return PASSED
