"""Compile caches packed on one host and unpacked on another: keys, checks, merge and drop, on real files."""

import io
import json
import os
import tarfile

import pytest

from sglfleet.host import compile_cache
from sglfleet.host.compile_cache import MANIFEST, Refused, cache_key, drop, pack, unpack
from sglfleet.host.layout import Layout
from sglfleet.plan.rollout_plan import later_of

STACK = "cu130-sglang-0.5.9-1a2b3c4d"
H200 = [("9.0", "580.95.05")] * 8


def test_the_key_tells_stacks_architectures_and_drivers_apart():
    key = cache_key(STACK, H200)
    assert key == "cu130-sglang-0.5.9-1a2b3c4d+sm90+580.95.05"
    assert cache_key("cu130-sglang-0.5.23-9f8e7d6c", H200) != key
    assert cache_key(STACK, [("12.0", "580.95.05")] * 8) == "cu130-sglang-0.5.9-1a2b3c4d+sm120+580.95.05"
    assert cache_key(STACK, [("9.0", "590.44.01")] * 8) != key
    assert cache_key(STACK, []) == f"{STACK}+cpu"
    assert cache_key(STACK, [("9.0", "580.95.05"), ("10.0", "580.95.05")]).endswith("+sm100-sm90+580.95.05")


def test_only_later_hosts_of_the_same_key_that_restart_make_a_host_hand_its_caches_on():
    batches = [("n1",), ("n2",), ("n3", "n4"), ("n5",)]
    keys = {"n1": "a", "n2": "a", "n3": "b", "n4": "a", "n5": "b"}
    assert later_of(batches, keys, set(keys)) == {"n1": True, "n2": True, "n3": True, "n4": False, "n5": False}
    # n4 and n5 serve already: nobody after n1 of key a restarts, and n3 has nobody to give to
    assert later_of(batches, keys, {"n1", "n2", "n3"}) == {"n1": True, "n2": False, "n3": False,
                                                           "n4": False, "n5": False}


@pytest.fixture
def hosts(tmp_path):
    """Two hosts' layouts side by side, with the stack present on each (archives of absent stacks go)."""
    made = []
    for name in ("canary", "later"):
        root = tmp_path / name
        layout = Layout(root=str(root / "opt"), service=f"sglfleet-test-{name}")
        made.append(layout)
        os.makedirs(layout.stack(STACK))
    return made


@pytest.fixture(autouse=True)
def cache_dirs(monkeypatch, tmp_path):
    """The unit's cache directory under tmp_path: /var/cache is not the test's."""
    monkeypatch.setattr(Layout, "cache_dir", property(lambda self: str(tmp_path / self.service / "cache")))


def _write(layout, name, data: bytes):
    path = os.path.join(layout.compile_cache(STACK), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def test_packed_caches_unpack_on_a_host_of_the_same_key_and_keep_what_it_has(hosts):
    canary, later = hosts
    os.utime(_write(canary, "triton/ABC/decode.cubin", b"kernel"), ns=(1_764_590_000_123_456_789,) * 2)
    _write(canary, "triton/ABC/decode.json", b"{}")
    _write(canary, ".cache/flashinfer/0.6.4/90a/cached_ops/sampling/.ninja_log", b"# ninja log v5\n")
    _write(later, "triton/ABC/decode.json", b"{\"own\": 1}")  # the host's own: kept
    packed = pack(STACK, canary, gpus=H200)
    assert packed["packed"] and packed["files"] == 3 and packed["key"] == cache_key(STACK, H200)
    archive = canary.compile_archive(packed["key"])
    assert oct(os.stat(archive).st_mode & 0o777) == "0o644"

    taken = unpack(archive, STACK, packed["key"], packed["sha256"], later)
    assert (taken["imported"], taken["kept"]) == (2, 1)
    folder = later.compile_cache(STACK)
    with open(os.path.join(folder, "triton/ABC/decode.cubin"), "rb") as handle:
        assert handle.read() == b"kernel"
    # to the nanosecond, as ninja's .ninja_deps recorded it: else flashinfer and tvm-ffi rebuild
    assert os.stat(os.path.join(folder, "triton/ABC/decode.cubin")).st_mtime_ns == \
        os.stat(os.path.join(canary.compile_cache(STACK), "triton/ABC/decode.cubin")).st_mtime_ns
    with open(os.path.join(folder, "triton/ABC/decode.json"), "rb") as handle:
        assert handle.read() == b"{\"own\": 1}"
    assert os.path.isfile(os.path.join(folder, ".cache/flashinfer/0.6.4/90a/cached_ops/sampling/.ninja_log"))
    assert unpack(archive, STACK, packed["key"], packed["sha256"], later)["already"]  # a second run: nothing

    # Its start with them failed: what it took goes, what it had and what changed since stay.
    _write(later, ".cache/flashinfer/0.6.4/90a/cached_ops/sampling/.ninja_log", b"rewritten by the server")
    assert drop(STACK, later)["dropped"] == 1
    assert not os.path.exists(os.path.join(folder, "triton/ABC/decode.cubin"))
    assert os.path.isfile(os.path.join(folder, "triton/ABC/decode.json"))
    assert os.path.isfile(os.path.join(folder, ".cache/flashinfer/0.6.4/90a/cached_ops/sampling/.ninja_log"))


def test_an_empty_cache_packs_nothing(hosts):
    assert pack(STACK, hosts[0], gpus=H200) == {"stage": "cache", "packed": False, "key": cache_key(STACK, H200)}


def test_an_archive_of_another_key_or_not_the_one_asked_for_is_refused_untouched(hosts):
    canary, later = hosts
    _write(canary, "triton/ABC/decode.cubin", b"kernel")
    packed = pack(STACK, canary, gpus=H200)
    archive = canary.compile_archive(packed["key"])
    blackwell = cache_key(STACK, [("12.0", "580.95.05")])
    with pytest.raises(Refused, match=r"holds caches for .*\+sm90\+.*this host is .*\+sm120\+"):
        unpack(archive, STACK, blackwell, packed["sha256"], later)
    with pytest.raises(Refused, match="not the archive asked for"):
        unpack(archive, STACK, packed["key"], "0" * 64, later)
    assert not os.path.exists(later.compile_cache(STACK))


def _archive(path, key, members):
    """A hand-made archive: a manifest that lists ``members`` as they are, then the members."""
    with tarfile.open(path, "w") as archive:
        files = {info.name: [info.size, "0" * 64] for info, _ in members}
        manifest = json.dumps({"key": key, "files": files}).encode()
        head = tarfile.TarInfo(MANIFEST)
        head.size = len(manifest)
        archive.addfile(head, io.BytesIO(manifest))
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return compile_cache.sha256_of(path)


@pytest.mark.parametrize("name, kind", [("../../etc/cron.d/x", tarfile.REGTYPE), ("/etc/passwd", tarfile.REGTYPE),
                                        ("triton/link", tarfile.SYMTYPE), ("triton/dev", tarfile.CHRTYPE)])
def test_a_member_that_is_not_a_plain_file_inside_the_cache_refuses_the_whole_archive(hosts, tmp_path, name, kind):
    later = hosts[1]
    good = tarfile.TarInfo("triton/ABC/decode.cubin")
    good.size = 6
    bad = tarfile.TarInfo(name)
    bad.type = kind
    bad.linkname = "/etc/shadow" if kind == tarfile.SYMTYPE else ""
    bad.size = 4 if kind == tarfile.REGTYPE else 0
    key = cache_key(STACK, H200)
    sha = _archive(tmp_path / "evil.tar", key, [(good, b"kernel"), (bad, b"evil" if bad.size else None)])
    with pytest.raises(Refused, match="not a plain file inside the cache"):
        unpack(str(tmp_path / "evil.tar"), STACK, key, sha, later)
    assert not os.path.exists(later.compile_cache(STACK))  # not even the good member


def test_a_truncated_archive_is_refused(hosts, tmp_path):
    canary, later = hosts
    _write(canary, "triton/ABC/decode.cubin", os.urandom(50_000))
    packed = pack(STACK, canary, gpus=H200)
    cut = tmp_path / "cut.tar"
    with open(canary.compile_archive(packed["key"]), "rb") as handle:
        cut.write_bytes(handle.read()[:20_000])
    with pytest.raises(Refused):
        unpack(str(cut), STACK, packed["key"], compile_cache.sha256_of(str(cut)), later)


def test_each_named_service_packs_its_own_caches_under_its_own_key_beside_the_hosts(hosts):
    """A host's services compile into their own folders: each one's archive is its own, and a later
    host's same service takes it; another service's archive is refused (``Layout.compile_key``)."""
    canary, later = hosts
    small, big = canary.for_service("small"), canary.for_service("big")
    _write(canary, "triton/ONE/k.cubin", b"the legacy service's")
    _write(small, "triton/SMALL/k.cubin", b"small's")
    legacy_packed, small_packed = pack(STACK, canary, gpus=H200), pack(STACK, small, gpus=H200)
    assert legacy_packed["key"] == cache_key(STACK, H200)  # as before services: hosts already deployed share it
    assert small_packed["key"] == f"{cache_key(STACK, H200)}+small" and small_packed["files"] == 1
    assert pack(STACK, big, gpus=H200)["packed"] is False  # big compiled nothing yet
    archive = small.compile_archive(small_packed["key"])
    assert archive != canary.compile_archive(legacy_packed["key"]) and os.path.isfile(archive)
    os.makedirs(later.for_service("small").cache_dir)  # its unit's CacheDirectory=
    taken = unpack(archive, STACK, small_packed["key"], small_packed["sha256"], later.for_service("small"))
    assert taken["imported"] == 1
    assert os.path.isfile(os.path.join(later.for_service("small").compile_cache(STACK), "triton/SMALL/k.cubin"))
    assert not os.path.exists(os.path.join(later.compile_cache(STACK), "triton/SMALL/k.cubin"))
    with pytest.raises(Refused, match="holds caches for"):
        unpack(archive, STACK, later.for_service("big").compile_key(cache_key(STACK, H200)),
               small_packed["sha256"], later.for_service("big"))
