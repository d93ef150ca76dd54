"""
Pinned models on the local fleet, staged from a real mirror: olah, offline,
on the bridge's address (each host's gateway), serving small models the tests
make as git repositories with LFS objects, as the Hub serves them.

In file order, sharing one fleet: the model and its EAGLE-3 draft are staged
on every host before any host restarts, and the server loads them offline; a
second converge transfers nothing; a byte corrupted on one host is found and
repaired before that host switches; a new revision shows in ``--dry --diff``,
then rolls out canary first while a full disk on one host fails that host
alone, its serving release untouched, and the next run resumes; collection
keeps the current and previous releases' revisions; a new revision fans out
(only round 0's host fetches from the mirror, the others from peers), and a
peer's corrupted file is refused and fetched from the mirror instead.
"""

import datetime
import hashlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploying import host_state, pyinfra, server_pid
from faulting import Run, results, serving
from paths import LAYOUT, UNIT
from sglfleet.artifacts.models import load_manifest
from sglfleet.devfleet.mirror import Mirror, commit, write_model
from sglfleet.host.prometheus import parse

pytestmark = pytest.mark.fleet

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))
MODEL, DRAFT = "testorg/tiny-model", "testorg/tiny-eagle3"
MIB = 1 << 20


class Models:
    """The mirror, the manifests and the revisions the tests deploy."""

    def __init__(self, mirror: Mirror, manifests: Path, revisions: dict[str, str], draft: str, sources: Path):
        self.mirror, self.manifests, self.revisions, self.draft = mirror, manifests, revisions, draft
        self.sources = sources  # the files each revision was made of: <sources>/<name lowercased>/
        self.env = {"SGLFLEET_MODELS": str(manifests)}

    def data(self, name: str, *more: str) -> list[str]:
        """``--data`` pinning the model at revision ``name`` and the draft, from the mirror."""
        pairs = [f"model_path={MODEL}", f"model_revision={self.revisions[name]}",
                 f"speculative_draft_model_path={DRAFT}", f"speculative_draft_model_revision={self.draft}",
                 f"hf_endpoint={self.mirror.url}", "allow_unpinned_models=False", *more]
        return [arg for pair in pairs for arg in ("--data", pair)]

    def deploy(self, name: str, *more: str, extra=()):
        return pyinfra("deploy.py", "-y", *self.data(name, *more), *extra, env=self.env, timeout=600)

    def dir(self, name: str) -> str:
        return LAYOUT.model(MODEL, self.revisions[name])

    def manifest(self, name: str):
        return load_manifest(MODEL, self.revisions[name], self.manifests)


def free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def models(fleet, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    mirror_dir = root / "mirror"
    revisions = {
        "A": commit(mirror_dir, MODEL, write_model(root / "a", seed=1), "A"),
        # B's big shard takes olah a few seconds to send: time for the full-disk fault to strike.
        "B": commit(mirror_dir, MODEL, write_model(root / "b", seed=2, shard_sizes=(MIB, 48 * MIB, MIB)), "B"),
        "C": commit(mirror_dir, MODEL, write_model(root / "c", seed=3), "C"),
        "D": commit(mirror_dir, MODEL, write_model(root / "d", seed=4, shard_sizes=(MIB, 8 * MIB, MIB)), "D"),
    }
    draft = commit(mirror_dir, DRAFT, write_model(root / "draft", seed=9, shard_sizes=(MIB,),
                                                  architecture="LlamaForCausalLMEagle3"), "draft")
    gateway = fleet.state()["gateway"]
    with Mirror(mirror_dir, gateway, free_port(gateway)) as mirror:
        manifests = root / "manifests"
        for repo, revision in [(MODEL, sha) for sha in revisions.values()] + [(DRAFT, draft)]:
            done = subprocess.run([SGLFLEET, "model", "lock", f"{repo}@{revision}", "--endpoint", mirror.url],
                                  env={**os.environ, "SGLFLEET_MODELS": str(manifests)},
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
        for host in fleet.hosts:
            fleet.fault(host, "clear")
        yield Models(mirror, manifests, revisions, draft, root)


def epoch(fleet, host: str, command: str) -> float:
    return float(fleet.exec(host, command).stdout.strip())


def started(fleet, host: str) -> float:
    """When sglang.service last became active, in epoch seconds (the hosts share the machine's clock)."""
    stamp = fleet.exec(host, f"systemctl show {UNIT} -p ActiveEnterTimestamp --timestamp=us+utc --value"
                       ).stdout.strip()
    return datetime.datetime.strptime(stamp, "%a %Y-%m-%d %H:%M:%S.%f UTC").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def sha256_on(fleet, host: str, path: str) -> str:
    return fleet.exec(host, f"sha256sum {path}").stdout.split()[0]


def test_models_are_staged_on_every_host_before_any_restart_and_load_offline(fleet, models):
    done = models.deploy("A")
    assert done.returncode == 0, done.stdout[-3000:]
    staged = {host: epoch(fleet, host, f"date -r {models.dir('A')}/.sglfleet-verified.json +%s.%N")
              for host in fleet.hosts}
    restarts = {host: started(fleet, host) for host in fleet.hosts}
    assert max(staged.values()) < min(restarts.values()), (staged, restarts)

    manifest = models.manifest("A")
    for host in fleet.hosts:
        for f in manifest.files:
            if f.sha256:
                assert sha256_on(fleet, host, f"{models.dir('A')}/{f.path}") == f.sha256, (host, f.path)
        pid = server_pid(fleet, host)
        environ = fleet.exec(host, f"tr '\\0' '\\n' < /proc/{pid}/environ").stdout.splitlines()
        command = fleet.exec(host, f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout
        assert "HF_HUB_OFFLINE=1" in environ
        assert f"--model-path {models.dir('A')} " in command
        assert f"--speculative-draft-model-path {LAYOUT.model(DRAFT, models.draft)} " in command
        # The stand-in read every tensor of both models.
        journal = fleet.exec(host, f"journalctl -u {UNIT} -o cat --no-pager -n 200").stdout
        assert re.search(r"Load weight end\. \(\d{7,} bytes of weights read", journal), journal[-2000:]
        state = host_state(fleet, host)
        assert {(m["repo"], m["revision"], m["verified"]) for m in state["models"]} >= {
            (MODEL, models.revisions["A"], True), (DRAFT, models.draft, True)}
        assert state["models_bytes"] >= manifest.size


def quiet_converge(fleet, models, name: str):
    """Converge on revision ``name`` again and check it changed nothing, asked the mirror for
    nothing and staged nothing; its output."""
    marker = f"{models.dir(name)}/.sglfleet-verified.json"
    checked = {host: fleet.exec(host, f"date -r {marker} +%s.%N").stdout for host in fleet.hosts}
    before = len(models.mirror.requests())
    done = models.deploy(name)
    assert done.returncode == 0, done.stdout[-3000:]
    assert results(done.stdout)["success"] == 0, done.stdout[-3000:]
    assert models.mirror.requests()[before:] == []
    # No staging ran: a check or a repair rewrites the marker (the check itself reads no model file:
    # test_models.py::test_check_of_a_staged_revision_opens_no_model_file).
    assert {host: fleet.exec(host, f"date -r {marker} +%s.%N").stdout for host in fleet.hosts} == checked
    return done


def test_a_second_converge_transfers_nothing_and_changes_nothing(fleet, models):
    quiet_converge(fleet, models, "A")


def test_a_corrupted_byte_on_one_host_is_repaired_before_it_switches(fleet, models):
    shard = f"{models.dir('A')}/model-00002-of-00003.safetensors"
    fleet.exec("node2", f"python3 -c \"f=open('{shard}','r+b'); f.seek(5000); b=f.read(1); f.seek(5000); "
                        f"f.write(bytes([b[0]^255])); f.close()\"")
    want = models.manifest("A").file("model-00002-of-00003.safetensors").sha256
    assert sha256_on(fleet, "node2", shard) != want
    dry = pyinfra("deploy.py", "--dry", *models.data("A", "standin_warmup_s=1.2"), env=models.env)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert [line.strip() for line in dry.stdout.splitlines() if "Drift: " in line] == [
        f"[node2] Drift: model {MODEL}@{models.revisions['A'][:12]} changed on the host: "
        f"model-00002-of-00003.safetensors: size or time differs from when it was verified; will check those "
        f"files against the manifest and fetch again what fails, before any switch"], dry.stdout[-3000:]
    assert sha256_on(fleet, "node2", shard) != want  # a dry run repairs nothing
    since = time.time()
    done = models.deploy("A", "standin_warmup_s=1.2")  # a new release, so every host switches
    assert done.returncode == 0, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    repaired = next(i for i, line in enumerate(lines) if "[node2]" in line and "(drifted)" in line)
    switched = next(i for i, line in enumerate(lines) if "[node2] wave1: will switch" in line)
    assert repaired < switched
    assert not any("[node1]" in line and "(drifted)" in line for line in lines)
    assert sha256_on(fleet, "node2", shard) == want
    # sglfleet.prom: the drift was marked when found, and cleared once the converge got through.
    found = parse(fleet.inside("node2", "cat /var/lib/prometheus/node-exporter/sglfleet.prom").stdout)
    assert {labels["kind"]: value for labels, value in found["sglfleet_drift"]}["model"] == 0
    assert {labels["kind"]: value for labels, value in found["sglfleet_drift_found_timestamp_seconds"]}["model"] > since


def fill_when_staging_starts(fleet, host: str, models_root: str, revision: str) -> None:
    """On ``host``: the model store on a small tmpfs holding what was there; once staging of ``revision``
    has its first file (config.json, while the big shard still flows), a filler takes the rest
    (bounded: it waits 120 s at most)."""
    fleet.exec(host, f"used=$(du -sk {models_root} | cut -f1) && mkdir -p /root/models-copy"
                     f" && cp -a {models_root}/. /root/models-copy/"
                     f" && mount -t tmpfs -o size=$((used + 330 * 1024))k tmpfs {models_root}"
                     f" && cp -a /root/models-copy/. {models_root}/ && rm -rf /root/models-copy")
    fleet.exec(host, f"setsid -f timeout 120 sh -c 'until ls {models_root}/{MODEL}/.{revision}.partial/config.json; do "
                     f"sleep 0.05; done; cat /dev/zero > {models_root}/.filler' </dev/null >/dev/null 2>&1")


def test_a_new_revision_shows_in_the_diff_then_rolls_out_canary_first_and_a_full_disk_fails_one_host(fleet, models):
    before = serving(fleet)
    dry = pyinfra("deploy.py", "--dry", "--diff", *models.data("B"), env=models.env)
    assert dry.returncode == 0, dry.stdout[-3000:]
    assert re.search(rf"-\s+--model-path {models.dir('A')}", dry.stdout), dry.stdout[-3000:]
    assert re.search(rf"\+\s+--model-path {models.dir('B')}", dry.stdout), dry.stdout[-3000:]
    assert re.search(r"Model testorg/tiny-model@\w+ \(absent\): stage \d+ of \d+ files", dry.stdout)
    assert fleet.exec("node1", f"test -e {models.dir('B')}", check=False).returncode != 0

    root = LAYOUT.models
    fill_when_staging_starts(fleet, "node3", root, models.revisions["B"])
    # Each host from the mirror: the fault strikes while the big shard still flows, which a
    # peer's copy (a whole file at once, in a fraction of a second) leaves no time for.
    direct = models.data("B", "distribution=controller")
    try:
        done = Run(*direct, env=models.env).finish(300)
        assert done.returncode != 0
        node3 = [line for line in done.stdout.splitlines() if "[node3]" in line]
        assert any("No space left on device" in line for line in node3), node3
        after = serving(fleet)
        assert after["node3"] == before["node3"] and after["node1"] == after["node2"] != before["node1"], after
        assert started(fleet, "node1") < started(fleet, "node2")  # canary first
        assert fleet.exec("node3", f"test -e {models.dir('B')}", check=False).returncode != 0
        assert fleet.exec("node3", f"test -d {models.dir('A')}", check=False).returncode == 0

        partial = f"{root}/{MODEL}/.{models.revisions['B']}.partial"
        inodes = dict(line.split()[::-1] for line in fleet.exec(
            "node3", f"cd {partial} && find . -maxdepth 1 -type f -printf '%i %f\\n'").stdout.splitlines())
        assert "config.json" in inodes, inodes  # what arrived before the disk filled

        fleet.exec("node3", f"rm -f {root}/.filler")  # space is freed; nothing else is cleaned
        again = Run(*direct, env=models.env).finish(300)
        assert again.returncode == 0, again.stdout[-3000:]
        assert len(set(serving(fleet).values())) == 1
        # The files that had arrived were checked and kept, not fetched again (same inodes).
        final = dict(line.split()[::-1] for line in fleet.exec(
            "node3", f"cd {models.dir('B')} && find . -maxdepth 1 -type f -printf '%i %f\\n'").stdout.splitlines())
        kept = {name for name in inodes if name in final and final[name] == inodes[name]}
        assert "config.json" in kept, (inodes, final)
    finally:
        # Keep what node3 staged: copy the small filesystem onto the disk beneath, then drop it.
        fleet.exec("node3", f"rm -f {root}/.filler; mkdir -p /mnt/opt && mount --bind {LAYOUT.root} /mnt/opt"
                            f" && cp -a {root}/. /mnt/opt/models/; umount /mnt/opt; umount -l {root}", check=False)


def test_collection_keeps_the_revisions_of_the_current_and_previous_releases(fleet, models):
    done = models.deploy("C", "releases_keep=0")
    assert done.returncode == 0, done.stdout[-3000:]
    for host in fleet.hosts:
        assert fleet.exec(host, f"test -d {models.dir('B')} && test -d {models.dir('C')}",
                          check=False).returncode == 0, host
        assert fleet.exec(host, f"test -e {models.dir('A')}", check=False).returncode != 0, host
        assert {m["revision"] for m in host_state(fleet, host)["models"] if m["repo"] == MODEL} == {
            models.revisions["B"], models.revisions["C"]}


# The host tool's one line for a staging: what came from peers, and from the source.
ORIGINS = re.compile(r"\[(node\d+)\] (\S+)@(\w{12}): (?:staged|repaired) .*?\((?:(\d+) bytes from (\d+) peer hosts, )?"
                     r"(\d+) bytes fetched from (\S+?)[;)]")


def origins(output: str, revision: str) -> dict[str, tuple[int, int]]:
    """``{host: (bytes from peers, bytes from the source)}`` for MODEL at ``revision``, from the run's output."""
    found = {}
    for match in ORIGINS.finditer(output):
        host, repo, short, peers, _, source, _ = match.groups()
        if repo == MODEL and revision.startswith(short):
            found[host] = (int(peers or 0), int(source))
    return found


def mirror_clients(models: Models, since: int, revision: str) -> dict[str, list[str]]:
    """``{client address: [request line]}`` of olah's requests for ``revision``'s files since request ``since``."""
    clients: dict[str, list[str]] = {}
    for line in models.mirror.requests()[since:]:
        found = re.search(r"(\d+\.\d+\.\d+\.\d+):\d+ - \"(\w+ \S+)", line)
        if found and revision in found.group(2):
            clients.setdefault(found.group(1), []).append(found.group(2))
    return clients


def served_units(fleet, host: str) -> str:
    return fleet.exec(host, "systemctl list-units --all --no-legend 'sglfleet-models-share-*'").stdout.strip()


def test_a_new_revision_fans_out_so_only_round_0_fetches_from_the_mirror(fleet, models):
    revision, manifest = models.revisions["D"], models.manifest("D")
    addresses = {host: record["address"] for host, record in fleet.state()["hosts"].items()}
    before = len(models.mirror.requests())
    done = models.deploy("D")
    assert done.returncode == 0, done.stdout[-3000:]
    seen = origins(done.stdout, revision)
    print("bytes (from peers, from the mirror):", seen, "of", manifest.size)
    # Peers serve no dot file (share.py), so .gitattributes (tens of bytes) comes from the mirror to each host.
    dotted = {f.path for f in manifest.files if any(part.startswith(".") for part in f.path.split("/"))}
    small = sum(manifest.file(path).size for path in dotted)
    assert seen == {"node1": (0, manifest.size), "node2": (manifest.size - small, small),
                    "node3": (manifest.size - small, small)}, done.stdout[-3000:]
    clients = mirror_clients(models, before, revision)
    assert set(clients) == set(addresses.values()), clients
    for host in ("node2", "node3"):  # the weights from the mirror to round 0's host alone
        assert {request.rsplit("/", 1)[-1] for request in clients[addresses[host]]} == dotted, clients
    # What D was made of; .gitattributes, which commit() adds, as the mirror's repository holds it.
    made = {f.path: models.sources / "d" / f.path for f in manifest.files}
    made.update({path: models.mirror.mirror / "models" / MODEL / path for path in made if not made[path].exists()})
    want = {path: hashlib.sha256(source.read_bytes()).hexdigest() for path, source in made.items()}
    for host in fleet.hosts:
        on_host = dict(line.split()[::-1] for line in fleet.exec(
            host, f"cd {models.dir('D')} && sha256sum {' '.join(sorted(want))}").stdout.splitlines())
        assert on_host == want, host
        assert (MODEL, revision, True) in {(m["repo"], m["revision"], m["verified"])
                                           for m in host_state(fleet, host)["models"]}
        assert served_units(fleet, host) == "", host  # every server stopped once all had staged

    again = quiet_converge(fleet, models, "D")
    assert origins(again.stdout, revision) == {}


def test_a_corrupted_file_on_a_peer_is_refused_on_arrival_and_fetched_from_the_mirror(fleet, models):
    revision, manifest = models.revisions["D"], models.manifest("D")
    shard = "model-00002-of-00003.safetensors"
    addresses = {host: record["address"] for host, record in fleet.state()["hosts"].items()}
    # node1 holds a flipped byte its check cannot see (size and time kept, as bit rot leaves them), and
    # lacks its README, so it repairs that and serves; node2 lacks the revision and fetches it from node1.
    fleet.exec("node1", f"cd {models.dir('D')} && rm README.md && python3 -c \"import os; s=os.stat('{shard}'); "
                        f"f=open('{shard}','r+b'); f.seek(5000); b=f.read(1); f.seek(5000); f.write(bytes([b[0]^255])); "
                        f"f.close(); os.utime('{shard}', ns=(s.st_atime_ns, s.st_mtime_ns))\"")
    assert sha256_on(fleet, "node1", f"{models.dir('D')}/{shard}") != manifest.file(shard).sha256
    fleet.exec("node2", f"rm -rf {models.dir('D')}")
    before = len(models.mirror.requests())
    try:
        done = models.deploy("D")
        assert done.returncode == 0, done.stdout[-3000:]
        seen = origins(done.stdout, revision)
        print("bytes (from peers, from the mirror):", seen)
        small = manifest.file(".gitattributes").size  # peers serve no dot file
        assert seen == {"node1": (0, manifest.file("README.md").size),
                        "node2": (manifest.size - manifest.file(shard).size - small,
                                  manifest.file(shard).size + small)}, done.stdout[-3000:]
        assert re.search(r"\[node2\] .*1 files came from no peer", done.stdout), done.stdout[-3000:]
        clients = mirror_clients(models, before, revision)
        assert {request.rsplit("/", 1)[-1] for request in clients[addresses["node2"]]} == {shard, ".gitattributes"}, \
            clients
        assert sha256_on(fleet, "node2", f"{models.dir('D')}/{shard}") == manifest.file(shard).sha256
    finally:
        fleet.exec("node1", f"touch {models.dir('D')}/{shard}", check=False)  # the next converge repairs it
