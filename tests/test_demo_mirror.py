"""
The demo mirror's models, as committed for olah (issue 43): two revisions of one model, oldest first,
the same architecture and shapes with other weights, and an EAGLE-3 draft that does not fit the target's
checkpoint. Git only: no mirror is started here (the fleet tests of tests/test_weights_fleet.py do).
"""

import json
import struct

from sglfleet.devfleet.mirror import DEMO_DRAFT, DEMO_MODEL, demo_models, git


def tensors(repo, commit: str) -> dict[str, tuple[list[int], str]]:
    """Every tensor of a revision: its shape, and the LFS object its shard is (name -> (shape, oid))."""
    found = {}
    for name in git(repo, "ls-tree", "--name-only", commit).split():
        if not name.endswith(".safetensors"):
            continue
        oid = git(repo, "show", f"{commit}:{name}").split("sha256:")[1].split()[0]
        data = (repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).read_bytes()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        found.update({key: (value["shape"], oid) for key, value in header.items() if key != "__metadata__"})
    return found


def test_the_demo_model_has_two_revisions_that_differ_only_in_their_weights(tmp_path):
    mirror_dir, revisions, draft = demo_models(tmp_path / "mirror")
    repo = mirror_dir / "models" / DEMO_MODEL
    assert git(repo, "rev-list", "--reverse", "HEAD").split() == revisions  # oldest first
    assert len(set(revisions)) == 2
    old, new = (tensors(repo, revision) for revision in revisions)
    assert {name: shape for name, (shape, _) in old.items()} == {name: shape for name, (shape, _) in new.items()}
    assert all(old[name][1] != new[name][1] for name in old)  # every shard's bytes differ
    # config.json is one git blob in both: the manifests (`sglfleet model lock`) hold the same digest for it.
    assert git(repo, "rev-parse", f"{revisions[0]}:config.json") == git(repo, "rev-parse", f"{revisions[1]}:config.json")


def test_the_demo_draft_does_not_fit_the_target_checkpoint(tmp_path):
    """Its one layer takes twice the hidden size: loaded from the target's path (sglang 0.5.11 on), it fails."""
    mirror_dir, revisions, draft = demo_models(tmp_path / "mirror")
    target = tensors(mirror_dir / "models" / DEMO_MODEL, revisions[0])
    layer = tensors(mirror_dir / "models" / DEMO_DRAFT, draft)["midlayer.self_attn.k_proj.weight"][0]
    first = target["model.layers.0.self_attn.k_proj.weight"][0]
    assert (layer[0], layer[1]) == (first[0], 2 * first[1])
