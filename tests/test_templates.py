"""The unit, env and launch templates: systemd accepts the unit, secrets stay in the env file."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from paths import LAYOUT, UNIT
from sglfleet.host.layout import Layout
from sglfleet.plan.release import render_release
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.secrets import SecretsError, engine_env, load_secrets, render_env
from sglfleet.plan.templates import TemplateRenderError, render_unit

CONFIG = validate_host_data("node1", {"stack": "dev", "model_path": "m", "speculative_algorithm": None})
HF, KEY = "hf_" + "x" * 30, "s3cr3t-api-key"
analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def unit_root(tmp_path: Path) -> Path:
    """A root with the unit, a release behind current, and systemd's own units (for verify --root)."""
    root = tmp_path / "root"
    unit = root / LAYOUT.unit_file.lstrip("/")
    unit.parent.mkdir(parents=True)
    unit.write_text(render_unit(CONFIG))
    release = root / LAYOUT.release("r1").lstrip("/")
    release.mkdir(parents=True)
    (release / "launch").write_text("#!/bin/bash\n")
    (release / "launch").chmod(0o755)
    (root / LAYOUT.current.lstrip("/")).symlink_to("releases/r1")
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    return root


@analyze
def test_unit_passes_systemd_analyze_verify(tmp_path):
    root = unit_root(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={root}", LAYOUT.unit_file],
        capture_output=True, text=True, timeout=60,
    )
    # verify exits 0 on unknown keys too: any complaint about our unit fails the test.
    assert result.returncode == 0 and UNIT not in result.stdout + result.stderr, result.stderr


@analyze
def test_unit_exposure_score_offline(tmp_path):
    unit = tmp_path / UNIT
    unit.write_text(render_unit(CONFIG))
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
                            capture_output=True, text=True, timeout=60)
    score = float(re.search(rf"Overall exposure level for {re.escape(UNIT)}: ([\d.]+)", result.stdout).group(1))
    assert score <= 2.5, result.stdout  # 2.0 "OK" when written; 10 is an unhardened unit


def test_unit_runs_the_current_release_with_limits_and_no_secret():
    unit = render_unit(CONFIG)
    for line in (f"ExecStart={LAYOUT.current}/launch", "Restart=on-failure",
                 f"EnvironmentFile={LAYOUT.env_file}", "LimitMEMLOCK=infinity",
                 "LimitNOFILE=1048576", "User=sglang", "DeviceAllow=char-nvidia* rwm",
                 "ProtectSystem=strict", "NoNewPrivileges=yes"):
        assert line + "\n" in unit
    timeout = int(re.search(r"^TimeoutStartSec=(\d+)$", unit, re.M).group(1))
    assert timeout > CONFIG.gate_warmup_s
    assert "api-key" not in unit and "TOKEN" not in unit


# The compile caches of the stack's wheels (their defaults cited in sglfleet/plan/release.py):
# each must survive a restart, so none may stay in the private /tmp or a default, and
# each stack has its own folder, which is what later hosts of the same stack are given.
COMPILE_CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
                  "TVM_FFI_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "SGLANG_CACHE_DIR", "CUDA_CACHE_PATH",
                  "XDG_CACHE_HOME")


def test_compile_caches_live_in_the_stacks_folder_of_the_units_cache_directory():
    unit = render_unit(CONFIG)
    assert "CacheDirectory=sglang\n" in unit and "PrivateTmp=yes\n" in unit
    for stack_id in ("dev-0a24832cc36f", "cu130-sglang-0.5.9-1a2b3c4d"):
        launch = render_release(CONFIG, stack_id, "").files["launch"][0]
        set_to = dict(re.findall(r"^export (\w+)=(.*)$", launch, re.M))
        for name in COMPILE_CACHES:
            assert set_to.get(name, "").startswith(f"{LAYOUT.cache_dir}/compile/{stack_id}"), name


@pytest.mark.parametrize("version, exported", [("0.5.9", None), ("0.5.13", "0"), ("0.5.23", "0"), (None, None)])
def test_a_failed_server_skips_the_coredump_wait_where_sglang_has_one(version, exported):
    # 0.5.13 on wait 60 s for CUDA coredumps no unit enables (the multi-node record's head: 65.6 s, silent)
    launch = render_release(CONFIG, "dev-0a24832cc36f", "", sglang_version=version).files["launch"][0]
    assert dict(re.findall(r"^export (\w+)=(.*)$", launch, re.M)).get("SGLANG_CUDA_COREDUMP_BEFORE_CRASH") == exported
    # a stack without it keeps its release id: no host restarts for it
    if exported is None:
        assert render_release(CONFIG, "dev-0a24832cc36f", "", sglang_version=version).release_id == \
            render_release(CONFIG, "dev-0a24832cc36f", "").release_id


def test_a_stop_goes_to_the_launch_script_alone_and_restarts_wait_as_set():
    unit = render_unit(CONFIG)
    assert "KillMode=mixed\n" in unit and "RestartSec=5\n" in unit  # the defaults, for production
    fast = validate_host_data("node1", {"stack": "dev", "model_path": "m", "speculative_algorithm": None,
                                        "service_restart_s": 1})
    assert "RestartSec=1\n" in render_unit(fast)


def test_env_file_and_its_redacted_form(tmp_path):
    secrets = load_secrets(None, {"SGLFLEET_HF_TOKEN": HF, "SGLFLEET_API_KEY": KEY})
    text = render_env(engine_env(secrets, behind_gateways=False))
    assert f"HF_TOKEN={HF}\n" in text and f"SGLANG_API_KEY={KEY}\n" in text
    shown = render_env(engine_env(secrets, behind_gateways=False), redacted=True)
    assert HF not in shown and KEY not in shown and "SGLANG_API_KEY=<redacted sha256:" in shown
    rotated = load_secrets(None, {"SGLFLEET_HF_TOKEN": HF, "SGLFLEET_API_KEY": KEY + "2"})
    assert render_env(engine_env(rotated, behind_gateways=False), redacted=True) != shown  # a rotation: a diff
    assert KEY not in repr(secrets)


def test_secrets_file_outside_repo_private_and_overridden_by_environment(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text(f"SGLFLEET_HF_TOKEN={HF}\nSGLFLEET_API_KEY=from-file\n")
    path.chmod(0o600)
    secrets = load_secrets(str(path), {"SGLFLEET_API_KEY": KEY})
    assert (secrets.hf_token, secrets.client_keys) == (HF, {"default": KEY})
    path.chmod(0o644)
    with pytest.raises(SecretsError, match="chmod 600"):
        load_secrets(str(path), {})
    with pytest.raises(SecretsError, match="inside the repository"):
        load_secrets(str(Path(__file__)), {})
    with pytest.raises(SecretsError, match="SGLFLEET_API_KEY: contains spaces"):
        load_secrets(None, {"SGLFLEET_API_KEY": "a b"})
    assert load_secrets(str(tmp_path / "absent.env"), {}).values == ()


def test_a_template_that_does_not_render_names_itself(tmp_path):
    (tmp_path / "sglang.service.j2").write_text("[Service]\nUser={{ user }\n")
    with pytest.raises(TemplateRenderError, match=r"sglang.service.j2:2: .*fix the template syntax"):
        render_unit(CONFIG, tmp_path)


def test_another_service_name_reaches_the_unit_and_the_launch_script():
    layout = Layout(service="sglang-a")
    unit = render_unit(CONFIG, layout=layout)
    launch = render_release(CONFIG, "dev-0123456789ab", "p1", layout=layout).launch_script
    for line in ("User=sglang-a", f"EnvironmentFile={layout.env_file}", f"Environment=HOME={layout.state_dir}",
                 "StateDirectory=sglang-a", "CacheDirectory=sglang-a", "RuntimeDirectory=sglang-a"):
        assert line + "\n" in unit
    assert f"{layout.unit} runs this" in launch and "${RUNTIME_DIRECTORY:-" + layout.runtime_dir + "}/" in launch
    for text in (unit, launch):
        # Not "sglang-a.service" nor "/run/sglang-a": the default name, whole.
        assert not re.search(r"(?<![\w-])sglang\.service|/run/sglang(?![\w-])|/var/lib/sglang(?![\w-])", text)
        assert not re.search(r"=sglang$|/sglang\.env", text, re.M)
