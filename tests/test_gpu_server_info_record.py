"""
The H200 record of ``bench/gpu_server_info.py`` (issue 41, part 2): real sglang 0.5.14's
``/server_info`` and ``/get_server_info``, and its start-up log, as the wheel has them and with
sglfleet's patch sets (tests/data/gpu/server-info-h200-sglang-0.5.14.json).

Held here: the files the GPU ran are what ``apply_sets`` writes on the wheel's files today; what
the record says (the keys in plain text unpatched, in the answer and in the log; redacted and
absent patched, the fields all present, nothing else changed); and the stand-in, over the same
0.5.14 sources patched or not, answering each of the record's requests as the real servers did.
"""

import hashlib
import json
import os
import signal

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts import patchsets
from sglfleet.artifacts.patcher import unified_diff
from sglfleet.artifacts.upstream import sglang_file
from test_standin import KIMI_PATH, get, launch, stop, wait_for  # noqa: F401  (fixtures)

GPU = PROJECT_ROOT / "tests" / "data" / "gpu"
RECORD = json.loads((GPU / "server-info-h200-sglang-0.5.14.json").read_text())
ANSWERS = RECORD["answers"]
CLIENT = RECORD["keys"]["unpatched"][1]
ADMIN = RECORD["keys"]["unpatched"][3]
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
REDACTED = {"api_key": "<redacted>", "admin_api_key": "<redacted>", "ssl_keyfile_password": None}


def server_log(name: str) -> str:
    return (GPU / f"server-info-h200-sglang-0.5.14-{name}.log").read_text()


def test_the_gpu_ran_the_files_sglfleet_writes_today():
    sets = patchsets.for_version(patchsets.load_sets(), "0.5.14")
    for member in set(patchsets.files(sets)) - set(RECORD["patch"]):  # a set added since: upstream's file as it was
        wheel = sglang_file("0.5.14", member).read_bytes()
        assert {o for _, o in patchsets.apply_sets(wheel, patchsets.for_file(sets, "0.5.14", member))[1]} == {"upstream"}
    for member, record in RECORD["patch"].items():
        wheel = sglang_file("0.5.14", member).read_bytes()
        on_file = patchsets.for_file(sets, "0.5.14", member)
        new, outcomes = patchsets.apply_sets(wheel, on_file)
        assert record["sets"] == [s.name for s in on_file]
        assert record["outcomes"] == {s.name: outcome for s, outcome in outcomes}
        assert record["sha256_wheel"] == record["sha256_site_original_after"] == hashlib.sha256(wheel).hexdigest()
        assert record["sha256_patched"] == hashlib.sha256(new).hexdigest() and record["second_apply_unchanged"]
        assert record["diff"] == (unified_diff(wheel, new, member) if new != wheel else "")
    assert RECORD["patch"][HTTP_SERVER]["outcomes"] == {"server_info_keys_redacted_kv_events": "applies"}


def test_unpatched_0_5_14_answers_and_logs_both_keys():
    assert RECORD["versions"]["sglang"] == "0.5.14" and RECORD["versions"]["gpu"] == "NVIDIA H200"
    assert not RECORD["standin"] and all(ready["ready"] for ready in RECORD["ready"].values())
    for path in ("server_info", "get_server_info"):
        answer = ANSWERS["unpatched"][f"{path}:client_key"]
        plain = {"api_key": CLIENT, "admin_api_key": ADMIN, "ssl_keyfile_password": None}
        assert answer["secrets"] == {"top": plain, "internal_states": [plain]}
        assert answer["client_key_in_body"] and answer["admin_key_in_body"]  # the admin key, to a client
    logged = RECORD["logs"]["unpatched"]
    assert logged["client_key_in_log"] and logged["admin_key_in_log"]
    assert f"api_key='{CLIENT}', admin_api_key='{ADMIN}'" in logged["server_args_line"]


@pytest.mark.parametrize("server, who, secrets", [
    ("patched", "client_key", REDACTED),
    ("patched_admin_only", "no_key", {**REDACTED, "api_key": None}),  # NORMAL: open to anyone
    ("patched_admin_only", "client_key", {**REDACTED, "api_key": None}),
])
def test_patched_0_5_14_answers_the_keys_redacted_and_logs_neither(server, who, secrets):
    for path in ("server_info", "get_server_info"):
        answer = ANSWERS[server][f"{path}:{who}"]
        assert answer["status"] == 200
        assert answer["secrets"] == {"top": secrets, "internal_states": [secrets]}
        assert not answer["client_key_in_body"] and not answer["admin_key_in_body"]
        # Every field still there (smg and other clients read the dict): the same names as unpatched.
        assert answer["fields"] == ANSWERS["unpatched"][f"{path}:client_key"]["fields"]
    text = server_log(server)
    assert CLIENT not in text and ADMIN not in text
    line = RECORD["logs"][server]["server_args_line"]
    assert "server_args=ServerArgs(" in line and "api_key=" not in line  # repr=False leaves both out


def test_the_route_stays_behind_the_client_key():
    # NORMAL: with --api-key only that key opens it; the admin key does not (0.5.14 utils/auth.py).
    for server in ("unpatched", "patched"):
        for path in ("server_info", "get_server_info"):
            assert [ANSWERS[server][f"{path}:{who}"]["status"] for who in ("no_key", "client_key", "admin_key")] \
                == [401, 200, 401]


# --- the stand-in, held to the record --------------------------------------------------


@pytest.fixture(scope="module")
def sglang_014_sites(tmp_path_factory):
    """0.5.14's Python sources as the wheel has them, and as the patch step leaves them (every set's file patched)."""
    from test_server_flags import python_tree

    plain = python_tree("0.5.14")
    root = tmp_path_factory.mktemp("sglang-0.5.14-patched")
    sets = patchsets.for_version(patchsets.load_sets(), "0.5.14")
    patched = set(patchsets.files(sets))
    for folder, _, names in os.walk(plain):
        relative = os.path.relpath(folder, plain)
        os.makedirs(root / relative, exist_ok=True)
        for name in names:
            member = os.path.normpath(os.path.join(relative, name))
            if member in patched:
                source = (plain / member).read_bytes()
                (root / member).write_bytes(patchsets.apply_sets(source, patchsets.for_file(sets, "0.5.14", member))[0])
            else:
                os.symlink(plain / member, root / member)
    return {"unpatched": plain, "patched": root, "patched_admin_only": root}


@pytest.mark.parametrize("server", list(ANSWERS))
def test_the_standin_answers_as_the_record(server, launch, sglang_014_sites):
    proc = launch(sglang_014_sites[server], *KIMI_PATH, *RECORD["flags"], *RECORD["keys"][server])
    wait_for(proc)
    for name, recorded in ANSWERS[server].items():
        if name == "body":
            continue
        path, who = name.split(":")
        key = {"no_key": None, "client_key": CLIENT, "admin_key": ADMIN}[who]
        code, body = get(f"{proc.url}/{path}", {"Authorization": f"Bearer {key}"} if key else {})
        assert code == recorded["status"], name
        if code == 200:
            answer = json.loads(body)
            state = answer["internal_states"][0]
            assert {"top": {k: answer.get(k, "absent") for k in REDACTED},
                    "internal_states": [{k: state.get(k, "absent") for k in REDACTED}]} == recorded["secrets"], name
            assert (CLIENT in body, ADMIN in body) == (recorded["client_key_in_body"], recorded["admin_key_in_body"])
    _, err = stop(proc, signal.SIGTERM)
    logged = RECORD["logs"][server]
    line = next(ln for ln in err.splitlines() if "server_args=ServerArgs(" in ln)
    assert (CLIENT in err, ADMIN in err) == (logged["client_key_in_log"], logged["admin_key_in_log"])
    assert ("admin_api_key=" in line) == logged["admin_api_key_field_in_line"]
