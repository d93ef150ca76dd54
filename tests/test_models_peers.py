"""The host tool's staging from peer hosts, without the fleet: aria2c is a stand-in that copies a peer's
store, so what is checked here is the Stager's part: every file checked, what peers did not give left to
the source, and for source "controller" listed for the controller to send."""

import hashlib
import json
import os
import shutil
import stat
import sys

import pytest

from sglfleet.host import models as host_models

REV = "4d01dfe0332d63057c186e0b262165819efb6611"
FAKE_ARIA2 = """#!{python}
# aria2c as far as the Stager uses it: each entry's first URI, read from $PEER_ROOT, written to out=.
import os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
entries, uri = [], None
for line in open(args["input-file"]):
    if not line.startswith(" "):
        uri = line.split("\\t")[0].strip()
    elif line.strip().startswith("out="):
        entries.append((uri, line.strip()[4:]))
for uri, out in entries:
    source = os.path.join(os.environ["PEER_ROOT"], uri.split("/", 3)[3])
    if os.path.isfile(source):
        os.makedirs(os.path.dirname(os.path.join(args["dir"], out)), exist_ok=True)
        with open(source, "rb") as f, open(os.path.join(args["dir"], out), "wb") as g:
            g.write(f.read())
"""


def manifest_of(folder):
    files = []
    for path in sorted(p for p in os.listdir(folder)):
        data = open(os.path.join(folder, path), "rb").read()
        entry = {"path": path, "size": len(data)}
        if path.endswith(".safetensors"):
            entry["sha256"] = hashlib.sha256(data).hexdigest()
        else:
            entry["git_sha1"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        files.append(entry)
    return {"repo": "org/m", "revision": REV, "files": files}


@pytest.fixture
def peers(tmp_path, monkeypatch):
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text("{}")
    (source / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    (source / "model-1.safetensors").write_bytes(os.urandom(4096))
    (source / "model-2.safetensors").write_bytes(os.urandom(4096))
    peer = tmp_path / "peer" / "org" / "m" / REV
    shutil.copytree(source, peer)
    flipped = bytearray((peer / "model-2.safetensors").read_bytes())
    flipped[100] ^= 255
    (peer / "model-2.safetensors").write_bytes(bytes(flipped))  # the peer's copy went bad
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aria2c").write_text(FAKE_ARIA2.format(python=sys.executable))
    (bin_dir / "aria2c").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("PEER_ROOT", str(tmp_path / "peer"))
    return source, manifest_of(source), tmp_path / "store" / "org" / "m" / REV


def stager(manifest, final, peers=()):
    text = json.dumps(manifest)
    return host_models.Stager(manifest, str(final), "controller", None, None, "/nonexistent",
                              hashlib.sha256(text.encode()).hexdigest(), peers)


def test_controller_source_takes_what_peers_give_and_lists_the_rest_for_the_controller(peers):
    source, manifest, final = peers
    with pytest.raises(host_models.NeedsUpload) as needs:
        stager(manifest, final, (f"http://node1:30090/org/m/{REV}",)).run()
    # The bad shard failed its check; .gitattributes was never asked of a peer (share.py serves no dot file).
    assert sorted(needs.value.paths) == [".gitattributes", "model-2.safetensors"]
    assert not final.exists()
    partial = host_models.partial_of(str(final))
    for path in needs.value.paths:  # what the operation uploads
        shutil.copy(source / path, os.path.join(partial, path))
    line = stager(manifest, final).run()
    assert "0 bytes fetched from the controller" in line and "interrupted staging" in line, line
    assert {p: (final / p).read_bytes() for p in os.listdir(source)} == \
        {p: (source / p).read_bytes() for p in os.listdir(source)}
    assert not (final / ".cache").exists()


def test_a_peer_line_counts_the_bytes_that_passed_and_the_files_that_did_not(peers):
    source, manifest, final = peers
    good = [e for e in manifest["files"] if e["path"] in ("config.json", "model-1.safetensors")]
    s = stager(manifest, final, (f"http://node1:30090/org/m/{REV}",))
    s.source = "hub"
    s.fetch = lambda paths: [shutil.copy(source / p, os.path.join(s.partial, p)) for p in paths] and None
    line = s.run()
    assert f"{sum(e['size'] for e in good)} bytes from 1 peer hosts" in line and "1 files came from no peer" in line, line
