"""
A weights-only change: a new model revision loaded by the running server, no restart. Pure.

sglang's ``POST /update_weights_from_disk`` loads a checkpoint into the model it serves, in place
(0.5.9 ``srt/entrypoints/http_server.py:914-935``). A change is weights-only where the release a host
serves and the one it should serve differ in the model's checkpoint alone: the same stack, patch sets,
unit and env file, flags and draft, and a checkpoint whose ``config.json`` is the serving one's (sglang
builds the model from it, so one file is one architecture and the same shapes; the manifests hold its
digest). Anything else restarts, as every change did before.

What each sglang does with speculative decoding (``speculative_refusal``), read in its code and, for
0.5.14, run on an H200 (``tests/data/gpu/weight-updates-h200-sglang-0.5.14.json``):

- 0.5.9 and 0.5.10 reload the target alone (``managers/scheduler_update_weights_mixin.py:46-56``); the
  draft keeps its weights, as a weights-only change wants (by reading; not run on a GPU).
- From 0.5.11 the draft is loaded from the *same* path after the target (0.5.11 mixin :53; 0.5.14
  ``managers/scheduler_components/weight_updater.py:108-119``; 0.5.23 :138-163, through ``_select_runners``
  :178-185). An EAGLE-3 draft's first layer takes twice the hidden size, so the target's checkpoint does
  not fit it; the rollback reads the same path again (``model_runner.py``: ``model_config.model_path`` is
  set before the load), fails again, and the server dies: on the H200, 0.5.14 ended with exit -9, the
  update's connection and every request waiting behind it closed unanswered. No field of the call names
  the draft's own path. So from 0.5.11 a speculative server is updated only by a restart.
- A PD role, and a server over several hosts (a group), restart: see ``speculative_refusal``.

**Example:**

.. code:: python

    policy = WeightsPolicy("auto", speculative_refusal("0.5.9", launch), release.release_json)
    weights_change(found.current_release, policy)
    # WeightsChange(in_place=True, why="only the weights change (4d01dfe0332d -> 9f0c2a7b1e44)", ...)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from packaging.version import InvalidVersion, Version

from sglfleet.artifacts.models import ModelError, load_manifest

WEIGHTS_UPDATES = ("auto", "in_place", "restart")
# The first sglang that loads the draft from the target's new path (above).
DRAFT_RELOADED_SINCE = Version("0.5.11")
PINNED = re.compile(r"^[0-9a-f]{40}$")
# What a release's args name the model by, and what differs between two revisions of it.
MODEL_FLAG = "--model-path"


def speculative_refusal(version: str | None, launch) -> str | None:
    """
    Why this sglang cannot update the weights of this launch in place; None where it can.

    + version: the stack's sglang version, e.g. ``"0.5.14"`` (None: the stack names none)
    + launch: the service's ``LaunchSettings``
    """
    if launch.disaggregation_mode:
        return (f"a {launch.disaggregation_mode} server's KV cache goes to its peers: its prefills and "
                f"decodes would serve two revisions at once; PD roles restart, unit by unit")
    if launch.nnodes > 1:
        return (f"a server over {launch.nnodes} hosts moves as one unit, and no GPU record shows an update "
                f"in place across its ranks; a group restarts")
    if not launch.speculative_algorithm:
        return None
    try:
        reloads_draft = version is None or Version(version) >= DRAFT_RELOADED_SINCE
    except InvalidVersion:
        reloads_draft = True
    if reloads_draft:
        return (f"sglang {version or '(unknown version)'} loads the {launch.speculative_algorithm} draft from the "
                f"new model path too and dies of its shapes (weight_updater.py; 0.5.14 on an H200: exit -9)")
    return None


@dataclass(frozen=True)
class WeightsPolicy:
    """
    How one service's new release may reach its hosts.

    + setting: the inventory's ``weights_update``: ``"auto"``, ``"in_place"`` or ``"restart"``
    + refusal: why its sglang cannot update in place (``speculative_refusal``), or None
    + release_json: the new release's ``release.json``
    """

    setting: str
    refusal: str | None
    release_json: str


@dataclass(frozen=True)
class WeightsChange:
    """
    What serving the new release takes on one host: an update in place, or a restart, and why.

    + in_place: the weights change alone, and they may be updated in place
    + why: what changes, as the run says it
    + model_path, weight_version: where the new weights are on the host, and its revision (in place)
    """

    in_place: bool
    why: str
    model_path: str = ""
    weight_version: str = ""

    def says(self) -> str:
        """``"in place: only the weights change (...)"``, or ``"restart: ..."``."""
        return f"{'in place' if self.in_place else 'restart'}: {self.why}"


def staged_revision(path: str | None) -> tuple[str, str] | None:
    """``(repo, revision)`` of a staged model's folder (``<models>/<org>/<name>/<revision>``), or None."""
    parts = (path or "").rstrip("/").split("/")
    if len(parts) < 4 or not PINNED.match(parts[-1]):
        return None
    return f"{parts[-3]}/{parts[-2]}", parts[-1]


def manifest_config(repo: str, revision: str) -> str | None:
    """The digest of ``config.json`` in a pinned revision's manifest, or None where there is none."""
    try:
        manifest = load_manifest(repo, revision)
    except ModelError:
        return None
    found = next((f for f in manifest.files if f.path == "config.json"), None)
    return (found.sha256 or found.git_sha1) if found else None


def flags(args: list) -> dict:
    """An argv as ``{flag: value}``, True for a flag without one."""
    found, at = {}, 0
    while at < len(args):
        valued = at + 1 < len(args) and not args[at + 1].startswith("--")
        found[args[at]] = args[at + 1] if valued else True
        at += 2 if valued else 1
    return found


def differences(serving: dict, new: dict) -> list[str]:
    """What differs between two releases' ``release.json`` but the model's checkpoint, as the run names it."""
    changed = []
    for key, name in (("stack", "the stack"), ("patch", "the patch sets"), ("service", "the unit or its env file"),
                      ("server", "the server"), ("gpus", "its GPUs"), ("service_name", "the service")):
        if serving.get(key) != new.get(key):
            changed.append(name)
    old_launch, new_launch = dict(serving.get("launch") or {}), dict(new.get("launch") or {})
    for launch in (old_launch, new_launch):
        launch.pop("model_path", None)  # another checkpoint of the same architecture is a weights change
    changed += sorted(key for key in set(old_launch) | set(new_launch) if old_launch.get(key) != new_launch.get(key))
    if not changed:  # the same settings, other flags: a pinned draft's new revision, another model store
        old_flags, new_flags = flags(serving.get("args") or []), flags(new.get("args") or [])
        changed += sorted(flag for flag in set(old_flags) | set(new_flags)
                          if flag != MODEL_FLAG and old_flags.get(flag) != new_flags.get(flag))
    return changed


def weights_change(serving: dict | None, policy: WeightsPolicy,
                   config_digest: Callable[[str, str], str | None] | None = None) -> WeightsChange | None:
    """
    What serving ``policy``'s release takes on a host that serves ``serving``; None where there is
    nothing to compare (no release served yet, or the same one).

    + serving: the ``release.json`` of the release the host serves (its read), or None
    + policy: the service's ``WeightsPolicy``
    + config_digest: ``(repo, revision) -> digest of its config.json``; None: from the manifests (``manifest_config``)

    **Example:**

    .. code:: python

        weights_change(found.current_release, policy).says()   # "restart: speculative_num_steps changes"
    """
    new = json.loads(policy.release_json)
    if not serving or serving.get("release_id") == new.get("release_id"):
        return None
    changed = differences(serving, new)
    if changed:
        return WeightsChange(False, f"{', '.join(changed)} change{'s' if len(changed) == 1 else ''}")
    old_path, new_path = flags(serving.get("args") or []).get(MODEL_FLAG), flags(new.get("args") or []).get(MODEL_FLAG)
    old, now = staged_revision(old_path), staged_revision(new_path)
    if old_path == new_path or old is None or now is None:
        return WeightsChange(False, "the launch script changes" if old_path == new_path
                             else "the model is not a pinned revision staged on the host")
    config_digest = config_digest or manifest_config
    old_config, new_config = config_digest(*old), config_digest(*now)
    if old_config is None or new_config is None or old_config != new_config:
        why = ("config.json differs between the revisions" if old_config and new_config
               else "no manifest holds config.json of both revisions")
        return WeightsChange(False, f"the model changes ({why})")
    if policy.setting == "restart":
        return WeightsChange(False, 'only the weights change, and weights_update is "restart"')
    if policy.refusal:
        return WeightsChange(False, f"only the weights change, but {policy.refusal}")
    return WeightsChange(True, f"only the weights change ({old[1][:12]} -> {now[1][:12]})",
                         model_path=new_path, weight_version=now[1])
