"""
The weights the stand-in serves, and ``POST /update_weights_from_disk`` as sglang answers it, per version.

**What it says derives from what it loaded.** Every tensor of the target's safetensors is read at
start (``standin_model.read_shard``), each hashed by name; the words it generates are drawn from
those digests (``Weights.vocabulary``), so two revisions of one model say different things and a
server updated to a revision says what a server started from it says. With no weights (a model
served by name), it says ``standin_engine.WORDS``, as it always has.

**The update** (0.5.9 ``srt/entrypoints/http_server.py:914-935``, ``managers/tokenizer_manager.py:1347-1385``,
``managers/scheduler_update_weights_mixin.py:46-56``, ``model_executor/model_runner.py:1111-1174``), held to
sglang 0.5.14 on an H200 (``tests/data/gpu/weight-updates-h200-sglang-0.5.14.json``):

1. Auth ``ADMIN_OPTIONAL``, as the installed ``http_server.py`` declares it (``standin_auth.route_levels``): the
   admin key where the server has one, else its API key.
2. ``abort_all_requests``: every request in flight ends at once, ``finish_reason`` abort, its stream
   closed cleanly (tokenizer_manager.py:1359-1360).
3. The model-update lock, writer side (:1363-1370): the update waits until every request in flight has
   ended (each holds the reader side until its last byte, :513), and requests that come meanwhile wait
   behind it (``utils/aio_rwlock.py:47``: a waiting writer goes first). ``/health`` too: its generation is
   an ordinary request (http_server.py:487-540), so it answers 200 meanwhile only while something else
   still produces output.
4. The weights iterator (model_runner.py:1144-1148): a path that is no folder is taken for a Hub id and
   fetched (the record's server, with no network, answered "[Errno -3] Temporary failure in name
   resolution"), a folder without weights "Cannot find any model weights": 400, nothing changed.
5. The target loads the path's tensors into its parameters by name; a name it lacks is skipped. A tensor
   of another shape (or a shard that does not read) raises; the rollback reads the *same new* path again
   (``model_config.model_path`` was set first, :1124, then :1152-1160), raises again, and the scheduler
   dies: "Scheduler hit an exception", from 0.5.13 "Sleeping 5 seconds before crash diagnostics"
   (0.5.14 tokenizer_manager.py:2585-2588), then the server kills its own tree: exit -9, the update's
   connection and every waiting one closed unanswered.
6. With speculative decoding, from 0.5.11 on, the draft is loaded from the same path after the target
   (0.5.11 ``scheduler_update_weights_mixin.py:53``; 0.5.14 ``scheduler_components/weight_updater.py:113-114``;
   0.5.23 ``weight_updater.py:143`` through ``_select_runners``, :178-185): an EAGLE-3 draft's first layer
   takes twice the hidden size, so a target's checkpoint does not fit it and the server dies as in 5
   (the record). 0.5.9 and 0.5.10 reload the target alone (mixin :50), the draft keeps its weights.
7. Success: ``weight_version`` is the one given (:1374-1376), ``model_path`` the path, and the served
   model's name becomes the path (``_update_model_path_info``, :1380-1384): ``/v1/models`` lists the
   path; ``/server_info``'s ``served_model_name`` and ``tokenizer_path`` stay.

**Example:**

.. code:: python

    weights = Weights.load("/models/tiny/rev-a", draft_path=None, vocab_size=1024)
    status, body = answer_update(standin, {"model_path": "/models/tiny/rev-b", "weight_version": "rev-b"})
    # 200, {"success": true, "message": "Succeeded to update model weights. Weight version updated to rev-b.", ...}
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from pathlib import Path

from standin_engine import WORDS
from standin_faults import update_fails
from standin_model import read_shard, release_tuple, weight_files

logger = logging.getLogger("sglang.standin")

DRAFT_RELOADED_SINCE = (0, 5, 11)  # the draft loads the target's path too (6. above)
CRASH_DIAGNOSTICS_SINCE = (0, 5, 13)  # "Sleeping 5 seconds before crash diagnostics" (5. above)
CRASH_DIAGNOSTICS_S = 5.0
# What the record's server, with no network, answered for a folder that does not exist: it took it for a Hub id.
NO_SUCH_FOLDER = "[Errno -3] Temporary failure in name resolution"
# An EAGLE-3 draft's checkpoint names its one layer midlayer; its load_weights loads it as layers.0
# (0.5.14 models/llama_eagle3.py:310-315, 334), where a target's checkpoint has its first layer.
DRAFT_NAMES = (("midlayer.", "model.layers.0."),)
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}  # the record's stream


class ModelUpdateLock:
    """``utils/aio_rwlock.RWLock`` for threads: requests read, an update writes, a waiting writer goes first."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = self._waiting_writers = 0
        self._writer = False

    @contextlib.contextmanager
    def reading(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and not self._waiting_writers)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self):
        with self._cond:
            self._waiting_writers += 1
            try:
                self._cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class SchedulerDied(Exception):
    """An update the scheduler does not survive; ``trace`` is what it logs."""

    def __init__(self, error: str, trace: str):
        super().__init__(error)
        self.trace = trace


def _shape(shape: tuple) -> str:
    return f"torch.Size([{', '.join(str(n) for n in shape)}])"


def draft_names(tensors: dict) -> dict:
    """A draft checkpoint's tensors by the names its model loads them as (``DRAFT_NAMES``)."""
    named = {}
    for name, value in tensors.items():
        for old, new in DRAFT_NAMES:
            name = new + name[len(old):] if name.startswith(old) else name
        named[name] = value
    return named


def _load_into(params: dict, loaded: dict, role: str) -> dict:
    """The parameters after ``loaded`` went into them by name; SchedulerDied at a tensor of another shape."""
    if role == "draft":
        loaded = draft_names(loaded)
    for name, (shape, _) in sorted(loaded.items()):
        if name in params and params[name][0] != shape:
            error = (f"AssertionError: param_data.shape={_shape(params[name][0])} "
                     f"loaded_weight.shape={_shape(shape)}")
            where = "llama_eagle3.py" if role == "draft" else "llama.py"
            raise SchedulerDied(error, "Traceback (most recent call last):\n"
                                '  File "sglang/srt/model_executor/model_runner.py", in update_weights_from_disk\n'
                                "    self.model = model_load_weights(self.model, iter)\n"
                                f'  File "sglang/srt/models/{where}", in load_weights\n'
                                '  File "sglang/srt/layers/linear.py", in weight_loader\n'
                                f"    param_data.shape == loaded_weight.shape\n{error}")
    skipped = sorted(set(loaded) - set(params))
    if skipped:  # load_weights skips a name the model has no parameter for
        logger.warning(f"{len(skipped)} tensors of the {role}'s path not found in params_dict, "
                       f"e.g. Parameter {skipped[0]} not found in params_dict")
    return {**params, **{name: value for name, value in loaded.items() if name in params}}


class Weights:
    """
    The target's (and the draft's) tensors, by name: ``{name: (shape, sha256)}``.

    + target, draft: the tensors each loaded
    + vocab_size: the target config's ``vocab_size``: the words it says are drawn from that many
    """

    def __init__(self, target: dict | None = None, draft: dict | None = None, vocab_size: int | None = None):
        self.target, self.draft = dict(target or {}), draft_names(draft or {})
        self.vocab_size = int(vocab_size or 1024)
        self.vocabulary = self._vocabulary()

    def _vocabulary(self) -> tuple[str, ...]:
        """The words it says, cycled: drawn from the target's weights, or WORDS without any."""
        if not self.target:
            return WORDS
        digest = hashlib.sha256("".join(f"{name}={sha}\n" for name, (_, sha) in sorted(self.target.items()))
                                .encode()).hexdigest()
        return tuple(f"w{int(digest[6 * i:6 * i + 6], 16) % self.vocab_size}" for i in range(len(WORDS)))

    def update_from_disk(self, path: str, speculative: bool, version: str) -> tuple[bool, str]:
        """
        Load ``path`` into the target (and the draft, where the version does): ``(success, message)``
        of a refusal that changes nothing, or ``(True, ...)``; ``SchedulerDied`` for one the server does not survive.
        """
        folder = Path(path)
        if not folder.is_dir():
            return False, f"Failed to get weights iterator: {NO_SUCH_FOLDER}."
        try:
            shards = weight_files(folder)
            if not shards:
                raise RuntimeError(f"Cannot find any model weights with `{path}`")
        except Exception as error:
            return False, f"Failed to get weights iterator: {error}."
        loaded: dict = {}
        try:
            read = sum(read_shard(shard, tensors=loaded) for shard in shards)
        except Exception as error:  # the load raises, and so does its rollback from the same path
            raise SchedulerDied(f"{type(error).__name__}: {error}",
                                f"Traceback (most recent call last):\n{type(error).__name__}: {error}") from None
        time.sleep(read / float(os.environ.get("SGLFLEET_STANDIN_LOAD_BPS", "1e9")))
        target = _load_into(self.target, loaded, "target")
        logger.info("Update weights end.")
        draft = self.draft
        if speculative and release_tuple(version) >= DRAFT_RELOADED_SINCE:
            draft = _load_into(self.draft, loaded, "draft")
        self.target, self.draft = target, draft
        self.vocabulary = self._vocabulary()
        return True, "Succeeded to update model weights."


def answer_update(standin, body: dict) -> tuple[int, dict]:
    """
    ``POST /update_weights_from_disk`` on a running stand-in: ``(status, body)``; the server dies
    (through ``standin.engine.crash``) where sglang's does.

    + standin: the server's state (``standin_http.Standin``)
    + body: the request's JSON (``UpdateWeightFromDiskReqInput``)
    """
    path = body.get("model_path")
    if not isinstance(path, str):
        raise ValueError("model_path: Field required")
    engine, args, version = standin.engine, standin.args, standin.version
    logger.info(f"Start update_weights. Load format={body.get('load_format') or args.get('load_format')}")
    if body.get("abort_all_requests"):
        engine.abort_all(ABORTED)
    with standin.model_update.writing():
        if update_fails() and path != standin.started_model_path:  # the fault: this folder holds no weights
            logger.error(message := f"Failed to get weights iterator: Cannot find any model weights with `{path}`.")
            return 400, {"success": False, "message": message, "num_paused_requests": 0}
        try:
            success, message = standin.weights.update_from_disk(
                path, args.get("speculative_algorithm") is not None, version)
        except SchedulerDied as died:
            settle = 0.0
            if release_tuple(version) >= CRASH_DIAGNOSTICS_SINCE:
                settle = CRASH_DIAGNOSTICS_S * float(os.environ.get("SGLFLEET_STANDIN_TIME_SCALE", "1"))
            engine.crash(died, died.trace, settle_s=settle)
            raise  # not reached: the process is gone
        if success:
            args["model_path"] = path
            args["load_format"] = body.get("load_format") or args.get("load_format")
            standin.served_model_name = path
            engine.vocabulary = standin.weights.vocabulary
            standin.openai_served = None  # its words are the new weights'
            if body.get("weight_version") is not None:
                args["weight_version"] = body["weight_version"]
                message += f" Weight version updated to {body['weight_version']}."
        else:
            logger.error(message)
    return (200 if success else 400), {"success": success, "message": message, "num_paused_requests": 0}
