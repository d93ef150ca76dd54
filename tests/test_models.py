"""
Pinned models without the fleet: the schema and lint, the manifest that
``sglfleet model lock`` writes from a real mirror (olah, offline), the host
tool's staging against that mirror (resume, corruption, drift, collection),
the launch it renders, and the stand-in loading what was staged.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet.artifacts.model_lock import write_manifest
from sglfleet.artifacts.models import (ModelError, load_manifest, offline, parse_manifest, served_launch,
                                       staged_models)
from sglfleet.devfleet.mirror import Mirror, commit, write_model
from sglfleet.host import models as host_models
from sglfleet.host.layout import Layout
from sglfleet.operations.models import wanted_paths
from sglfleet.plan.lint import model_findings
from sglfleet.plan.release import render_release
from sglfleet.plan.schema import validate_host_data

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "files" / "standin"))
import standin_model  # noqa: E402


def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """olah on 127.0.0.1 serving testorg/tiny-model at two revisions, and their manifests."""
    root = tmp_path_factory.mktemp("mirror")
    first = commit(root / "mirror", "testorg/tiny-model", write_model(root / "v1", seed=1), "first")
    second = commit(root / "mirror", "testorg/tiny-model", write_model(root / "v2", seed=2), "second")
    with Mirror(root / "mirror", "127.0.0.1", free_port()) as served:
        manifests = root / "manifests"
        done = subprocess.run([SGLFLEET, "model", "lock", f"testorg/tiny-model@{first}", "--endpoint", served.url],
                              capture_output=True, text=True, env={**os.environ, "SGLFLEET_MODELS": str(manifests)},
                              timeout=120)
        assert done.returncode == 0, done.stderr
        write_manifest("testorg/tiny-model", "main", served.url, manifests)  # a branch resolves to its commit
        yield served, manifests, first, second, root


def test_lock_writes_every_file_with_the_digest_the_hub_gives(mirror):
    served, manifests, first, second, root = mirror
    manifest = load_manifest("testorg/tiny-model", first, manifests)
    source = root / "v1"
    assert sorted(f.path for f in manifest.files) == sorted([".gitattributes", *(p.name for p in source.iterdir())])
    for f in manifest.files:
        if f.path.endswith(".safetensors"):
            assert f.sha256 == hashlib.sha256((source / f.path).read_bytes()).hexdigest() and not f.git_sha1
        elif f.path != ".gitattributes":
            data = (source / f.path).read_bytes()
            assert f.git_sha1 == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert f.size == (source / f.path).stat().st_size if f.path != ".gitattributes" else True
    # `main` was resolved to the second commit, and its manifest differs.
    assert load_manifest("testorg/tiny-model", second, manifests).digest != manifest.digest


def config(**data):
    base = {"stack": "dev", "model_path": "testorg/tiny-model", "speculative_draft_model_path": "testorg/draft"}
    return validate_host_data("node1", {**base, **data})


def test_lint_refuses_a_branch_or_no_revision_unless_allowed(tmp_path):
    errors = [str(f) for f in model_findings("node1", config(model_revision="main"), tmp_path)]
    assert any("error: model_revision: testorg/tiny-model: 'main' is a branch or tag, not a commit" in e
               for e in errors), errors
    assert any("error: speculative_draft_model_revision: testorg/draft: no revision" in e for e in errors), errors
    assert model_findings("node1", config(model_revision="main", allow_unpinned_models=True), tmp_path) == []


def test_a_pinned_model_without_its_manifest_names_the_command_and_the_source(tmp_path):
    sha = "4d01dfe0332d63057c186e0b262165819efb6611"
    (finding,) = [f for f in model_findings("node1", config(model_revision=sha, hf_endpoint="http://m.internal:8090",
                                                            allow_unpinned_models=True), tmp_path)
                  if f.severity == "error"]
    assert finding.key == "model_revision"
    assert f"run `sglfleet model lock testorg/tiny-model@{sha} --endpoint http://m.internal:8090` " \
           f"where http://m.internal:8090 can be reached" in finding.message


def test_release_loads_staged_folders_offline_and_its_id_covers_the_revision(mirror):
    served, manifests, first, second, root = mirror
    pinned = dict(model_revision=first, speculative_draft_model_path=None, speculative_algorithm=None,
                  models_dir="/nvme/models")
    release = render_release(config(**pinned), "dev-0123456789ab", "p1")
    assert "--model-path /nvme/models/testorg/tiny-model/" + first in release.args_text
    assert "export HF_HUB_OFFLINE=1" in release.launch_script
    other = render_release(config(**{**pinned, "model_revision": second}), "dev-0123456789ab", "p1")
    assert other.release_id != release.release_id
    # An unpinned draft is fetched by the server: no offline flag then.
    mixed = config(model_revision=first, allow_unpinned_models=True)
    assert not offline(mixed) and served_launch(mixed).speculative_draft_model_path == "testorg/draft"
    assert [m.role for m in staged_models(mixed)] == ["model"]


def stage(layout, manifest, final, endpoint, source="hub", env=None):
    """The host tool's ``models stage`` as the deploy runs it, with this venv's huggingface_hub as the stack's."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from sglfleet.host.cli import main; from sglfleet.host.layout import Layout;"
         f" sys.exit(main(sys.argv[1:], Layout(root={layout.root!r}, etc={layout.etc!r})))",
         "models", "stage", "--dir", final, "--source", source, "--python", sys.executable, "--endpoint", endpoint],
        input=manifest.text, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_staging_resumes_verifies_repairs_and_collects(mirror, tmp_path):
    served, manifests, first, second, root = mirror
    layout = Layout(root=str(tmp_path / "opt"), etc=str(tmp_path / "etc"))
    manifest = load_manifest("testorg/tiny-model", first, manifests)
    final = layout.model("testorg/tiny-model", first)
    spec = [{"dir": final, "digest": manifest.digest}]
    assert host_models.check(spec)[0]["state"] == "absent"

    # A killed staging left one verified file and one half-written shard: the next resumes.
    partial = Path(host_models.partial_of(final))
    partial.mkdir(parents=True)
    (partial / "config.json").write_bytes((root / "v1" / "config.json").read_bytes())
    shard = "model-00002-of-00003.safetensors"
    (partial / shard).write_bytes((root / "v1" / shard).read_bytes()[:1000])
    host_models.write_json(str(partial / host_models.MARKER), {"manifest": manifest.digest, "files": {
        "config.json": host_models.stat_of(str(partial / "config.json"))}})
    answer = host_models.check(spec)[0]
    assert answer["state"] == "partial" and answer["verified"] == ["config.json"]
    # The half-written shard is replaced, not added to: its blocks count as free for the space check.
    assert answer["unchecked"] == os.stat(partial / shard).st_blocks * 512 > 0
    assert "config.json" not in wanted_paths(manifest, answer) and shard in wanted_paths(manifest, answer)
    before = len(served.requests())
    done = stage(layout, manifest, final, served.url)
    assert done.returncode == 0, done.stderr
    fetched = [line for line in served.requests()[before:] if '"GET ' in line]
    assert not any(f"/{first}/config.json " in line for line in fetched), fetched
    assert any(f"/{first}/{shard} " in line for line in fetched), fetched
    assert "1 files already there from an interrupted staging, checked and kept" in done.stdout
    for f in manifest.files:
        want, found = host_models.digest_of(os.path.join(final, f.path), {"sha256": f.sha256, "git_sha1": f.git_sha1})
        assert want == found, f.path
    assert not partial.exists() and not (Path(final) / ".cache").exists()
    assert host_models.check(spec)[0]["state"] == "ok"

    # One flipped byte changes the file's mtime: found by a stat, repaired in place.
    target = Path(final) / "model-00001-of-00003.safetensors"
    with open(target, "r+b") as handle:
        handle.seek(4000)
        byte = handle.read(1)
        handle.seek(4000)
        handle.write(bytes([byte[0] ^ 0xFF]))
    answer = host_models.check(spec)[0]
    assert answer == {**answer, "state": "drifted", "changed": [target.name]}
    done = stage(layout, manifest, final, served.url)
    assert done.returncode == 0 and "replaced 1 files that failed their check" in done.stdout, done.stderr
    assert hashlib.sha256(target.read_bytes()).hexdigest() == manifest.file(target.name).sha256

    # Collection: what no release loads and no run wants goes; the wanted stays.
    old = layout.model("testorg/tiny-model", "0" * 40)
    os.makedirs(old)
    assert host_models.collect([final], layout, dry_run=True) == [old] and os.path.isdir(old)
    assert host_models.collect([final], layout) == [old] and not os.path.exists(old) and os.path.isdir(final)
    assert host_models.inventory(layout)["models"] == [
        {"repo": "testorg/tiny-model", "revision": first, "bytes": manifest.size, "verified": True}]


def test_check_of_a_staged_revision_opens_no_model_file(mirror, tmp_path, monkeypatch):
    served, manifests, first, second, root = mirror
    layout = Layout(root=str(tmp_path / "opt"), etc=str(tmp_path / "etc"))
    manifest = load_manifest("testorg/tiny-model", first, manifests)
    final = layout.model("testorg/tiny-model", first)
    assert stage(layout, manifest, final, served.url).returncode == 0
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    assert host_models.check([{"dir": final, "digest": manifest.digest}])[0]["state"] == "ok"
    assert opened == [os.path.join(final, host_models.MARKER)]


def test_a_mirror_serving_corrupt_bytes_fails_the_staging_and_leaves_nothing_in_place(mirror, tmp_path):
    served, manifests, first, second, root = mirror
    layout = Layout(root=str(tmp_path / "opt"), etc=str(tmp_path / "etc"))
    manifest = load_manifest("testorg/tiny-model", second, manifests)
    shard = manifest.file("model-00003-of-00003.safetensors")
    lfs = root / "mirror" / "models" / "testorg" / "tiny-model" / ".git" / "lfs" / "objects"
    obj = lfs / shard.sha256[:2] / shard.sha256[2:4] / shard.sha256
    good = obj.read_bytes()
    obj.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # olah serves it and its ETag quietly
    try:
        final = layout.model("testorg/tiny-model", second)
        done = stage(layout, manifest, final, served.url)
    finally:
        obj.write_bytes(good)
    assert done.returncode == 1
    assert f"testorg/tiny-model@{second[:12]}: 1 files from {served.url} do not match the manifest " \
           f"(model-00003-of-00003.safetensors)" in done.stderr
    assert not os.path.exists(final)
    # The files that passed stay verified for the next run.
    assert len(host_models.check([{"dir": final, "digest": manifest.digest}])[0]["verified"]) == len(manifest.files) - 1


def test_the_token_reaches_the_fetch_by_environment_only(tmp_path):
    env_file = tmp_path / "sglang.env"
    env_file.write_text("HF_TOKEN=hf_secret1234\nSGLANG_API_KEY=sk-other\n")
    env = host_models.hub_environment(str(env_file), "http://m:1")
    assert env["HF_TOKEN"] == "hf_secret1234" and env["HF_ENDPOINT"] == "http://m:1" and "SGLANG_API_KEY" not in env


def test_manifest_refuses_a_path_outside_the_model():
    text = json.dumps({"repo": "a/b", "revision": "0" * 40, "files": [{"path": "../x", "size": 1, "sha256": "0"}]})
    with pytest.raises(ModelError, match="outside the model"):
        parse_manifest(text)


def test_standin_loads_a_staged_model_and_refuses_a_missing_or_truncated_shard(tmp_path):
    folder = write_model(tmp_path / "m", seed=3)
    sizes = sum((folder / n).stat().st_size for n in os.listdir(folder) if n.endswith(".safetensors"))
    loaded = standin_model.load_weights(str(folder))
    assert 0 < loaded < sizes  # the tensors' bytes, without the headers
    assert standin_model.load_weights("moonshotai/Kimi-K2.5") == 0  # served by name: nothing to load

    shard = folder / "model-00002-of-00003.safetensors"
    data = shard.read_bytes()
    shard.write_bytes(data[:-10])
    with pytest.raises(standin_model.SafetensorError, match="incomplete metadata, file not fully covered"):
        standin_model.load_weights(str(folder))
    shard.unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00003"):
        standin_model.load_weights(str(folder))
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            (folder / name).unlink()
    with pytest.raises(RuntimeError, match=f"Cannot find any model weights with `{folder}`"):
        standin_model.load_weights(str(folder))
    (folder / "model.safetensors.index.json").unlink()
    assert standin_model.load_weights(str(folder)) == 0  # config.json alone: an architecture, no weights
    (folder / "config.json").unlink()
    with pytest.raises(OSError, match="does not appear to have a file named config.json"):
        standin_model.load_weights(str(folder))


def test_standin_truncation_error_is_the_one_safetensors_gives(tmp_path):
    from safetensors import SafetensorError, safe_open
    folder = write_model(tmp_path / "m", seed=4, shard_sizes=(4096,))
    shard = folder / "model-00001-of-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[:-3])
    with pytest.raises(SafetensorError) as real:
        safe_open(str(shard), framework="pt")
    with pytest.raises(standin_model.SafetensorError) as ours:
        standin_model.read_shard(shard)
    assert str(ours.value) == str(real.value)


def test_the_controllers_copy_is_hashed_once_per_content_and_a_changed_file_again(tmp_path):
    import hashlib
    import os

    from sglfleet.artifacts.models import Manifest, ModelFile
    from sglfleet.operations.models import controller_copy

    good = b"weights"
    manifest = Manifest("org/m", "a" * 40, (ModelFile("w.bin", len(good), sha256=hashlib.sha256(good).hexdigest()),),
                        digest="d", text="")
    local = tmp_path / "org/m" / ("a" * 40) / "w.bin"
    local.parent.mkdir(parents=True)
    local.write_bytes(good)
    assert controller_copy(str(tmp_path), manifest, ["w.bin"]) == {"w.bin": local}
    local.write_bytes(b"wEights")  # the same size, a new mtime: hashed again
    os.utime(local, ns=(1, 1))
    with pytest.raises(ModelError, match="does not match the manifest: fetch it again"):
        controller_copy(str(tmp_path), manifest, ["w.bin"])
    local.write_bytes(b"short")
    with pytest.raises(ModelError, match="does not match"):
        controller_copy(str(tmp_path), manifest, ["w.bin"])
