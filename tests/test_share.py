"""share.py's path rules, against a real server on loopback: what a peer may fetch and what never leaves."""

import http.client
import threading
from http.server import ThreadingHTTPServer

import pytest

from sglfleet.host import share
from sglfleet.host.aria2 import aria2_input
from sglfleet.artifacts.fanout import turns as fan_out

REV = "4d01dfe0332d63057c186e0b262165819efb6611"


@pytest.fixture
def store(tmp_path):
    root = tmp_path / "models"
    final = root / "org" / "m" / REV
    (final / "sub").mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / "sub" / "a b.txt").write_text("spaced")
    (final / ".sglfleet-verified.json").write_text("{}")
    partial = root / "org" / "m" / f".{'1' * 40}.partial"
    partial.mkdir()
    (partial / "config.json").write_text("half")
    (tmp_path / "secret").write_text("no")
    (final / "escape").symlink_to(tmp_path / "secret")
    (root / "wheel-1.0+cu130.whl").write_text("w")
    return root


def serve(folder, nested):
    handler = type("H", (share.Handler,), {"folder": str(folder), "nested": nested})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def get(server, path, headers=None):
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    connection.request("GET", path, headers=headers or {})  # sent as written: no client-side normalising
    answer = connection.getresponse()
    return answer.status, answer.read()


@pytest.mark.parametrize("path, status, body", [
    (f"/org/m/{REV}/config.json", 200, b"{}"),
    (f"/org/m/{REV}/sub/a%20b.txt", 200, b"spaced"),
    (f"/org/m/{REV}/.sglfleet-verified.json", 404, b""),   # markers stay
    (f"/org/m/.{'1' * 40}.partial/config.json", 404, b""),  # partial folders never leave
    (f"/org/m/{REV}/../{REV}/config.json", 404, b""),
    (f"/org/m/{REV}/%2e%2e/%2e%2e/../../secret", 404, b""),
    (f"/org/m/{REV}/escape", 404, b""),                    # a symlink out of the folder
    (f"/org/m/{REV}//config.json", 404, b""),
    (f"/org/m/{REV}/sub", 404, b""),                       # a folder is no file
    ("/", 404, b""),
    ("/wheel-1.0+cu130.whl", 200, b"w"),
])
def test_a_nested_server_serves_only_files_inside_its_folder_with_no_dot_component(store, path, status, body):
    server = serve(store, nested=True)
    try:
        got = get(server, path)
        assert got[0] == status
        if status == 200:
            assert got[1] == body
    finally:
        server.shutdown()


def test_a_flat_server_serves_no_subfolder_and_ranges_still_work(store):
    server = serve(store, nested=False)
    try:
        assert get(server, f"/org/m/{REV}/config.json")[0] == 404
        assert get(server, "/wheel-1.0+cu130.whl") == (200, b"w")
        assert get(server, "/wheel-1.0+cu130.whl", {"Range": "bytes=0-0"}) == (206, b"w")
    finally:
        server.shutdown()


def test_servable_resolves_the_path_and_checks_it_stays_inside(store):
    assert share.servable(str(store), f"org/m/{REV}/config.json", nested=True) == str(
        (store / "org" / "m" / REV / "config.json").resolve())
    assert share.servable(str(store), f"org/m/{REV}/escape", nested=True) is None
    assert share.servable(str(store), "..", nested=True) is None


def test_model_files_go_out_quoted_and_unchecked_only_without_a_sha256():
    text = aria2_input([("sub/a b.txt", None), ("model.safetensors", "cc" * 32)],
                       (f"http://n1:30090/org/m/{REV}",))
    assert text.splitlines() == [
        f"http://n1:30090/org/m/{REV}/sub/a%20b.txt", "  out=sub/a b.txt.part",
        f"http://n1:30090/org/m/{REV}/model.safetensors", "  out=model.safetensors.part",
        f"  checksum=sha-256={'cc' * 32}",
    ]


def test_rounds_say_who_fetches_from_whom_and_who_serves():
    hosts = [(f"n{i}", f"10.0.0.{i}") for i in range(1, 5)]  # (name, address), as the plan gives them
    turns = {name: [s for s in fan_out(name, hosts, "peers", 30090, "u") if s] for name, _ in hosts}
    assert {name: [(s.round, s.sources, s.serves) for s in shares] for name, shares in turns.items()} == {
        "n1": [(0, (), True)],
        "n2": [(1, ("http://10.0.0.1:30090",), True)],
        "n3": [(2, ("http://10.0.0.1:30090", "http://10.0.0.2:30090"), False)],
        "n4": [(2, ("http://10.0.0.1:30090", "http://10.0.0.2:30090"), False)],
    }
    # distribution "controller": every host stages from the source, in one round, and serves nothing.
    assert all(len(list(fan_out(name, hosts, "controller", 30090, "u"))) == 1 for name, _ in hosts)
    assert all(not s.serves and not s.sources for name, _ in hosts for s in fan_out(name, hosts, "controller", 30090, "u"))
