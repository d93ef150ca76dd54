"""
The fleet's keys (issue 41): one for each role, kept in the controller's secrets file, handed to
each host by its role, and the operator's ``sglfleet keys``; the stand-in's auth decided as the
real sglang's ``decide_request_auth`` decides it, over the real wheel's routes.
"""

import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.keys import KEY_BYTES, KeysError, KeyStore
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.hooks.planning import made_admin_keys
from sglfleet.plan.secrets import SecretsError, engine_env, gateway_env, load_secrets
from test_standin import KIMI_PATH, get, launch, sglang_059, stop, wait_for  # noqa: F401  (fixtures)

sys.path.insert(0, str(PROJECT_ROOT / "files" / "standin"))
import standin_auth  # noqa: E402  (files/standin/, as the stand-in imports it)

SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text("# the operator's own comment\nSGLFLEET_HF_TOKEN=hf_abc\n")
    path.chmod(0o600)
    return KeyStore(path)


def test_admin_keys_are_made_once_strong_and_private(store):
    made = store.ensure_admin_keys()
    assert [key.role for key in made] == ["gateway-admin", "engine-admin"]
    for key in made:
        assert len(key.value) >= len("sglx-") + KEY_BYTES * 4 // 3 and key.made
    assert store.ensure_admin_keys() == []  # a second run makes nothing
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    text = store.path.read_text()
    assert text.startswith("# the operator's own comment\nSGLFLEET_HF_TOKEN=hf_abc\n")  # kept, in place
    assert [key.value for key in store.keys()] == [key.value for key in made]
    assert [name for name in os.listdir(store.path.parent) if name.startswith(".secrets.env.")
            and not name.endswith(".lock")] == []  # no temporary left behind


def test_a_client_key_is_issued_revoked_and_rotated_by_name(store):
    billing = store.issue("billing")
    assert billing.value.startswith("sglc-") and billing.role == "client"
    with pytest.raises(KeysError, match="already issued"):
        store.issue("billing")
    with pytest.raises(KeysError, match="a client key's name"):
        store.issue("Bad Name")
    rotated = store.rotate("billing")
    assert rotated.value != billing.value and store.find("billing").value == rotated.value
    assert store.revoke("billing").value == rotated.value and store.find("billing") is None
    with pytest.raises(KeysError, match="no client key 'billing'"):
        store.revoke("billing")
    with pytest.raises(KeysError, match="cannot be revoked"):
        store.revoke("engine-admin")


def test_a_rotated_gateway_admin_stays_the_controllers_fallback_until_revoked(store):
    store.ensure_admin_keys()
    old = store.find("gateway-admin").value
    new = store.rotate("gateway-admin").value
    secrets = load_secrets(store.path, {})
    assert secrets.gateway_admin_keys == (new, old)  # tried in this order: a gateway not restarted holds the old
    assert gateway_env(secrets)["SGLFLEET_GATEWAY_ADMIN_KEY"] == new and old not in gateway_env(secrets).values()
    assert store.revoke("gateway-admin-previous").value == old
    assert load_secrets(store.path, {}).gateway_admin_keys == (new,)


def test_one_key_for_two_roles_is_refused(store):
    store.ensure_admin_keys()
    admin = store.find("engine-admin").value
    with pytest.raises(SecretsError, match="the same key is given for engine-admin and client key 'default'"):
        load_secrets(store.path, {"SGLFLEET_API_KEY": admin})


def test_each_host_gets_only_what_its_role_needs(store):
    store.ensure_admin_keys()
    store.issue("billing")
    secrets = load_secrets(store.path, {"SGLFLEET_API_KEY": "sk-legacy-key"})
    engine_admin, gateway_admin = secrets.admin("engine-admin"), secrets.admin("gateway-admin")
    behind = engine_env(secrets, behind_gateways=True)
    assert behind == {"HF_TOKEN": "hf_abc", "SGLANG_ADMIN_API_KEY": engine_admin}  # no client key, no gateway key
    gateway = gateway_env(secrets)
    assert gateway == {"SGLFLEET_CLIENT_KEY_billing": secrets.client_keys["billing"],
                       "SGLFLEET_CLIENT_KEY_default": "sk-legacy-key", "SGLFLEET_GATEWAY_ADMIN_KEY": gateway_admin}
    with pytest.raises(SecretsError, match="2 client keys .* and no gateway"):
        engine_env(secrets, behind_gateways=False)
    alone = load_secrets(None, {"SGLFLEET_API_KEY": "sk-legacy-key", "SGLFLEET_ENGINE_ADMIN_KEY": "sgle-x"})
    assert engine_env(alone, behind_gateways=False) == {"SGLANG_API_KEY": "sk-legacy-key",
                                                       "SGLANG_ADMIN_API_KEY": "sgle-x"}


def test_a_run_makes_the_admin_keys_the_environment_does_not_give(tmp_path, capsys):
    path = tmp_path / "fleet.env"
    made_admin_keys([str(path), None, str(path)], environ={})
    assert {key.role for key in KeyStore(path).keys()} == {"gateway-admin", "engine-admin"}
    said = capsys.readouterr().err
    assert said.count("sglfleet: made the") == 2 and KeyStore(path).keys()[0].value not in said
    other = tmp_path / "other.env"
    made_admin_keys([str(other)], environ={"SGLFLEET_GATEWAY_ADMIN_KEY": "g", "SGLFLEET_ENGINE_ADMIN_KEY": "e"})
    assert not other.exists()


def _keys(*args, secrets_file: Path):
    inventory = secrets_file.with_name("inventory.py")
    inventory.write_text(f"hosts = [('node1', {{'stack': 'dev', 'model_path': 'm', 'speculative_algorithm': None, "
                         f"'gpu_less': True, 'secrets_file': {str(secrets_file)!r}}})]\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SGLFLEET_")}
    return subprocess.run([SGLFLEET, "keys", args[0], str(inventory), *args[1:]], capture_output=True, text=True,
                          env=env, cwd=PROJECT_ROOT, timeout=120)


def test_the_operators_keys_command(tmp_path):
    path = tmp_path / "secrets.env"
    issued = _keys("issue", "billing", secrets_file=path)
    assert issued.returncode == 0, issued.stderr
    key = issued.stdout.strip().splitlines()[-1]
    assert issued.stdout == key + "\n" and key.startswith("sglc-")  # alone, on the last line
    listed = _keys("list", secrets_file=path)
    assert listed.returncode == 0 and key not in listed.stdout
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["billing"][1] == "client" and rows["engine-admin"][2] == "-"  # made by the next converge
    assert _keys("show", "billing", secrets_file=path).stdout == key + "\n"
    assert _keys("rotate", "billing", secrets_file=path).returncode == 0
    assert _keys("show", "billing", secrets_file=path).stdout not in ("", key + "\n")
    assert _keys("revoke", "billing", secrets_file=path).returncode == 0
    gone = _keys("show", "billing", secrets_file=path)
    assert gone.returncode == 1 and gone.stderr == "sglfleet keys: no key 'billing'; " \
                                                   f"`sglfleet keys list {tmp_path / 'inventory.py'}` shows them\n"
    refused = _keys("revoke", "gateway-admin", secrets_file=path)
    assert refused.returncode == 1 and "cannot be revoked" in refused.stderr


def _real_decide(version: str):
    spec = importlib.util.spec_from_file_location(f"sglang_auth_{version}", sglang_file(version, "sglang/srt/utils/auth.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", ["0.5.9", "0.5.14", "0.5.23"])
def test_the_standin_decides_as_sglang_decides(version):
    real = _real_decide(version)
    for level in ("NORMAL", "ADMIN_OPTIONAL", "ADMIN_FORCE"):
        for api_key in (None, "client"):
            for admin_key in (None, "admin"):
                for sent in (None, "Bearer client", "Bearer admin", "bearer admin", "Basic admin"):
                    for method, path in (("POST", "/flush_cache"), ("GET", "/health"), ("OPTIONS", "/x")):
                        want = real.decide_request_auth(method=method, path=path, authorization_header=sent,
                                                        api_key=api_key, admin_api_key=admin_key,
                                                        auth_level=real.AuthLevel[level])
                        got = standin_auth.decide(method, path, sent, api_key, admin_key, level)
                        assert got[0] == want.allowed and (want.allowed or got[1] == want.error_status_code), \
                            (level, api_key, admin_key, sent, method, path)


def test_the_standin_reads_each_routes_level_from_the_installed_release(sglang_059):
    routes = standin_auth.route_levels(sglang_059 / "sglang")
    assert standin_auth.level_of(routes, "POST", "/update_weights_from_disk") == "ADMIN_OPTIONAL"
    assert standin_auth.level_of(routes, "GET", "/flush_cache") == "ADMIN_OPTIONAL"
    assert standin_auth.level_of(routes, "POST", "/dumper/start") == "ADMIN_OPTIONAL"
    assert standin_auth.level_of(routes, "POST", "/generate") == "NORMAL"
    assert len(routes) >= 30  # 0.5.9 declares 35 ADMIN_OPTIONAL routes


def test_the_standins_management_endpoints_answer_the_engine_admin_key_alone(launch, sglang_059):
    proc = launch(sglang_059, *KIMI_PATH, "--admin-api-key", "sgle-admin")
    wait_for(proc)
    client = {"Authorization": "Bearer sglc-client"}
    assert get(proc.url + "/flush_cache", client) == (401, json.dumps({"error": "Unauthorized"}, separators=(",", ":")))
    assert get(proc.url + "/flush_cache", {"Authorization": "Bearer sgle-admin"})[0] == 200
    assert get(proc.url + "/generate", client, {"text": "hi", "sampling_params": {"max_new_tokens": 1}})[0] == 200
    stop(proc, signal.SIGTERM)
