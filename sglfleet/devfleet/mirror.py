"""Small models for the local fleet, and a real HF-compatible mirror (olah, offline) that serves them.

A model is a folder of what the Hub holds for a small llama-style model:
``config.json``, tokenizer files, a README and sharded safetensors with their
``model.safetensors.index.json``. ``commit`` turns it into the git repository
olah reads (LFS pointers committed, objects under ``.git/lfs/objects``, made by
hand as git-lfs's clean filter would) and returns the commit. ``Mirror`` runs
``olah-cli`` on an address the local fleet's hosts reach (the bridge's) and
stops it by its pid. ``start_demo`` and ``stop_demo`` keep one running for the
local fleet's demo (``sglfleet devfleet mirror up|down``): a tiny model in two revisions
(the same architecture and shapes, other weights: a weights-only change is one
``--data model_revision=...`` away) and its EAGLE-3 draft, pinned, with their
manifests, recorded in ``mirror.json`` (``"revisions"``, oldest first; ``"revision"``
is the first, which the local fleet serves).

**Example:**

.. code:: python

    write_model(tmp / "src", seed=1, shard_sizes=(1 << 20, 2 << 20))
    sha = commit(tmp / "mirror", "testorg/tiny-model", tmp / "src", "first")
    with Mirror(tmp / "mirror", "10.213.60.1", 8090) as mirror:
        ...  # HF_ENDPOINT=mirror.url
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def shard_bytes(tensors: dict[str, int | tuple[int, ...]], seed: int) -> bytes:
    """A safetensors file of F32 tensors ``{name: elements or shape}`` with seeded random bytes, in the real format."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        shape = list(shape) if isinstance(shape, tuple) else [shape]
        count = math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 4 * count]}
        offset += 4 * count
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text + random.Random(seed).randbytes(offset)


# ChatML, as small models on the Hub carry it: the stand-in renders it for /v1/chat/completions.
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
                 " + '<|im_end|>' + '\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def write_model(folder: Path, seed: int, shard_sizes=(1 << 20, 2 << 20, 512 << 10),
                architecture: str = "LlamaForCausalLM", extra_tensors: dict | None = None) -> Path:
    """
    Write a small sharded model into ``folder``; return it.

    + extra_tensors: ``{name: shape}`` written first into the first shard, for tensors a test names
      (the stand-in loads weights by name and shape, as sglang does)
    """
    folder.mkdir(parents=True, exist_ok=True)
    count = len(shard_sizes)
    weight_map, total = {}, 0
    for number, size in enumerate(shard_sizes, 1):
        name = f"model-{number:05d}-of-{count:05d}.safetensors"
        tensors = {**(extra_tensors or {} if number == 1 else {}),
                   f"model.layers.{number}.weight": size // 8, f"model.layers.{number}.bias": size // 8}
        (folder / name).write_bytes(shard_bytes(tensors, seed * 100 + number))
        weight_map.update({tensor: name for tensor in tensors})
        total += size
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (folder / "config.json").write_text(json.dumps(
        {"architectures": [architecture], "model_type": "llama", "hidden_size": 64, "vocab_size": 256,
         "num_hidden_layers": count, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "t1", "eos_token": "t2",
         "chat_template": CHAT_TEMPLATE}))
    (folder / "tokenizer.json").write_text(json.dumps(
        {"version": "1.0", "model": {"type": "WordLevel", "vocab": {f"t{i}": i for i in range(256)},
                                     "unk_token": "t0"}}))
    (folder / "README.md").write_text(f"---\nlicense: mit\n---\n# a test model (seed {seed})\n")
    return folder


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
                          ).stdout.strip()


def commit(mirror: Path, repo_id: str, source: Path, message: str) -> str:
    """Commit ``source``'s files as the next revision of ``repo_id`` in olah's mirror folder; the commit."""
    repo = mirror / "models" / repo_id
    if not (repo / ".git").is_dir():
        repo.mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "tests@sglfleet.invalid")
        git(repo, "config", "user.name", "sglfleet tests")
        (repo / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    for path in repo.iterdir():
        if path.name not in (".git", ".gitattributes"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for path in sorted(source.iterdir()):
        data = path.read_bytes()
        if path.suffix == ".safetensors":
            oid = hashlib.sha256(data).hexdigest()
            store = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4]
            store.mkdir(parents=True, exist_ok=True)
            (store / oid).write_bytes(data)
            data = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()
        (repo / path.name).write_bytes(data)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


class Mirror:
    """olah serving ``mirror`` offline on ``address:port``; a context manager that stops it by its pid."""

    def __init__(self, mirror: Path, address: str, port: int):
        self.mirror, self.address, self.port = mirror, address, port
        self.workdir = mirror.parent / "olah"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "stdout.log"

    def requests(self) -> list[str]:
        """The requests olah answered so far (uvicorn's access lines)."""
        return [line for line in self.log.read_text().splitlines() if '"GET ' in line or '"HEAD ' in line
                or '"POST ' in line]

    def __enter__(self) -> Mirror:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "olah.toml"
        config.write_text(
            f'[basic]\nhost = "{self.address}"\nport = {self.port}\n'
            f'repos-path = "{self.workdir / "repos"}"\nmirrors-path = ["{self.mirror}"]\n'
            f"\n[accessibility]\noffline = true\n")
        olah = str(Path(sys.executable).with_name("olah-cli"))
        # Its own session: a demo's mirror outlives the command that started it.
        self.process = subprocess.Popen([olah, "-c", str(config)], cwd=self.workdir, stdin=subprocess.DEVNULL,
                                        stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:  # olah's index page answers 500; an API path is the readiness probe
            try:
                urllib.request.urlopen(f"{self.url}/api/models/none/none/revision/main", timeout=2)
                return self
            except urllib.error.HTTPError:
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"olah did not start on {self.url}:\n{self.log.read_text()[-2000:]}")
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


DEMO_MODEL, DEMO_DRAFT = "demo/tiny-model", "demo/tiny-eagle3"
DEMO_SEEDS = (1, 3)  # the demo model's revisions, oldest first: the same config and shapes, other weights
# Tensors the stand-in loads by name and shape, as sglang does: the target's first attention projection,
# and the draft's one layer, which takes twice the hidden size (an EAGLE-3 draft's does: its input is the
# token's embedding beside the target's hidden state). Loaded from the target's path, the draft's does not fit.
DEMO_TARGET_TENSORS = {"model.layers.0.self_attn.k_proj.weight": (128, 64)}
DEMO_DRAFT_TENSORS = {"midlayer.self_attn.k_proj.weight": (128, 128)}


def demo_models(folder: Path) -> tuple[Path, list[str], str]:
    """
    Write the demo's model revisions and its draft, and commit them into olah's mirror folder
    ``folder/repos``: ``(that folder, the model's commits oldest first, the draft's commit)``.

    + folder: the demo's folder (``.fleet/mirror``), emptied first
    """
    shutil.rmtree(folder, ignore_errors=True)
    mirror_dir = folder / "repos"
    # Kimi K2.5's architecture: the stand-in checks the patched EAGLE-3 methods as for the real model.
    revisions = [commit(mirror_dir, DEMO_MODEL, write_model(folder / f"src-model-{number}", seed=seed,
                                                            architecture="KimiK25ForConditionalGeneration",
                                                            extra_tensors=DEMO_TARGET_TENSORS),
                        f"tiny model, revision {number}")
                 for number, seed in enumerate(DEMO_SEEDS, 1)]
    draft = commit(mirror_dir, DEMO_DRAFT, write_model(folder / "src-draft", seed=2, shard_sizes=(1 << 20,),
                                                       architecture="LlamaForCausalLMEagle3",
                                                       extra_tensors=DEMO_DRAFT_TENSORS), "tiny draft")
    return mirror_dir, revisions, draft


def demo_record(state_dir: Path) -> Path:
    return state_dir / "mirror.json"


def start_demo(state_dir: Path, address: str, port: int, lock) -> dict:
    """
    Make the demo's tiny model (two revisions) and draft, serve them with olah on ``address:port``
    (running on after this returns; ``stop_demo`` ends it), lock every revision's manifest
    with ``lock(repo, revision, url, manifests)``, and record it all.

    + state_dir: the fleet's state folder (``.fleet``)
    + address, port: where hosts reach the mirror (the bridge's address)
    + lock: writes one manifest, e.g. by running ``sglfleet model lock``
    """
    folder = state_dir / "mirror"
    mirror_dir, revisions, draft = demo_models(folder)
    mirror = Mirror(mirror_dir, address, port).__enter__()
    record = {"url": mirror.url, "pid": mirror.process.pid, "manifests": str(folder / "manifests"),
              "model": DEMO_MODEL, "revision": revisions[0], "revisions": revisions,
              "draft": DEMO_DRAFT, "draft_revision": draft}
    demo_record(state_dir).write_text(json.dumps(record, indent=2) + "\n")
    for repo, sha in [(DEMO_MODEL, revision) for revision in revisions] + [(DEMO_DRAFT, draft)]:
        lock(repo, sha, mirror.url, folder / "manifests")
    return record


def stop_demo(state_dir: Path) -> bool:
    """Stop the demo's mirror by the pid it recorded; False when none runs."""
    record_path = demo_record(state_dir)
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(record["pid"], signal.SIGTERM)
    except ProcessLookupError:
        pass
    record_path.unlink()
    return True
