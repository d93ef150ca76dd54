"""
The stand-in shows the API keys as the installed sglang does (issue 41, part 2): ``/server_info``
and ``/get_server_info`` in plain text on the release as the wheel has it, redacted on one that
sglfleet's patch sets changed; its start-up log's ``ServerArgs`` with the keys, or without them
where ``server_args.py`` declares them ``repr=False``. Each case a stand-in process over the real
0.5.9 sources, patched or not by ``apply_sets`` (as the patch step writes them on a host).
"""

import json
import os
import signal

import pytest

from sglfleet.artifacts.patchsets import apply_sets, files, for_file, for_version, load_sets
from test_standin import KIMI_PATH, get, launch, sglang_059, stop, wait_for  # noqa: F401  (fixtures)

CLIENT, ADMIN = "sk-standin-client", "sk-standin-admin"
SECRETS = ("api_key", "admin_api_key")  # 0.5.9 has no ssl_keyfile_password


@pytest.fixture(scope="session")
def sglang_059_all_sets(sglang_059, tmp_path_factory):
    """0.5.9 as a host has it after the patch step: every file a shipped set names patched, the rest linked."""
    root = tmp_path_factory.mktemp("sglang-0.5.9-patched")
    sets = for_version(load_sets(), "0.5.9")
    patched = set(files(sets))
    for folder, _, names in os.walk(sglang_059):
        relative = os.path.relpath(folder, sglang_059)
        os.makedirs(root / relative, exist_ok=True)
        for name in names:
            member = os.path.normpath(os.path.join(relative, name))
            if member in patched:
                source = (sglang_059 / member).read_bytes()
                (root / member).write_bytes(apply_sets(source, for_file(sets, "0.5.9", member))[0])
            else:
                os.symlink(sglang_059 / member, root / member)
    assert "sglang/srt/entrypoints/http_server.py" in patched and "sglang/srt/server_args.py" in patched
    return root


# (site, flags, the key a client sends or None) -> the two fields /server_info answers, and whether
# the start-up log carries a key.
CASES = {
    "as the wheel has it, both keys": ("sglang_059", ["--api-key", CLIENT, "--admin-api-key", ADMIN], CLIENT,
                                       (CLIENT, ADMIN), True),
    "as the wheel has it, the admin key alone: open to anyone": ("sglang_059", ["--admin-api-key", ADMIN], None,
                                                                 (None, ADMIN), True),
    "patched, both keys": ("sglang_059_all_sets", ["--api-key", CLIENT, "--admin-api-key", ADMIN], CLIENT,
                           ("<redacted>", "<redacted>"), False),
    "patched, the admin key alone": ("sglang_059_all_sets", ["--admin-api-key", ADMIN], None,
                                     (None, "<redacted>"), False),
}


@pytest.mark.parametrize("case", CASES)
def test_server_info_shows_the_keys_as_the_installed_release(case, launch, request):
    fixture, flags, key, shown, logged = CASES[case]
    proc = launch(request.getfixturevalue(fixture), *KIMI_PATH, *flags)
    wait_for(proc)  # /health needs no key; the warm-up sends the client key itself
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    answers = {}
    for path in ("/server_info", "/get_server_info"):
        code, body = get(proc.url + path, headers)
        assert code == 200, body
        answers[path] = json.loads(body)
        if key:  # the route stays behind the client key (NORMAL): the admin key does not open it
            assert get(proc.url + path)[0] == get(proc.url + path, {"Authorization": f"Bearer {ADMIN}"})[0] == 401
    info = answers["/server_info"]
    assert answers["/get_server_info"] == info
    for state in (info, *info["internal_states"]):
        assert tuple(state[k] for k in SECRETS) == shown  # present either way: clients read the dict
    assert (CLIENT in json.dumps(info) or ADMIN in json.dumps(info)) == logged
    _, err = stop(proc, signal.SIGTERM)
    line = next(ln for ln in err.splitlines() if "server_args=ServerArgs(" in ln)
    assert (ADMIN in err, "admin_api_key=" in line) == (logged, logged)
