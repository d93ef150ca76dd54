"""Releases: the launch command line, a stable content-hash id, and no secret anywhere in them."""

import contextlib
import json
import os
import runpy
import select
import signal
import subprocess
import time

import pytest

from dataclasses import fields

from paths import LAYOUT
from sglfleet import PROJECT_ROOT
from sglfleet.host.gate import GateSettings
from sglfleet.plan.release import gate_settings, launch_args, render_release
from sglfleet.plan.schema import validate_host_data

BASE = {"stack": "dev", "model_path": "moonshotai/Kimi-K2.5", "trust_remote_code": True,
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
        "tp_size": 8, "extra_flags": ["--max-running-requests", "64"]}


def config(**data):
    return validate_host_data("node1", {**BASE, **data})


def test_launch_args_are_sglang_flags_in_a_fixed_order():
    assert launch_args(config(listen_host="127.0.0.1").launch) == [
        "--model-path", "moonshotai/Kimi-K2.5", "--trust-remote-code", "--tp-size", "8",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "lightseekorg/kimi-k2.5-eagle3",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--enable-metrics",
        "--host", "127.0.0.1", "--port", "30000", "--max-running-requests", "64",
    ]


def test_release_id_is_a_stable_content_hash_of_stack_patch_and_launch():
    release = render_release(config(), "dev-0123456789ab", "p1")
    assert len(release.release_id) == 16 and int(release.release_id, 16) >= 0
    assert render_release(config(), "dev-0123456789ab", "p1").release_id == release.release_id
    changed = {
        render_release(config(), "dev-ba9876543210", "p1").release_id,
        render_release(config(), "dev-0123456789ab", "p2").release_id,
        render_release(config(speculative_num_steps=4, speculative_num_draft_tokens=5), "dev-0123456789ab", "p1").release_id,
        render_release(config(extra_flags=[]), "dev-0123456789ab", "p1").release_id,
    }
    assert release.release_id not in changed and len(changed) == 4


def test_gate_and_housekeeping_keys_do_not_change_the_release_id():
    one = render_release(config(), "s", "p")
    other = render_release(config(gate_warmup_s=60, router_url="http://r:1", releases_keep=9,
                                  gate_min_spec_accept_length=2.0, gate_bake_s=300), "s", "p")
    assert (one.release_id, one.files) == (other.release_id, other.files)
    # The thresholds travel in the release, outside what its id covers.
    gate = json.loads(other.settings["gate.json"][0])
    assert (gate["warmup_s"], gate["min_spec_accept_length"], gate["bake_s"]) == (60, 2.0, 300)
    assert json.loads(one.settings["gate.json"][0])["min_spec_accept_length"] is None


def test_gate_json_is_what_the_host_tool_loads(tmp_path):
    from sglfleet.host.gate import GateSettings
    from sglfleet.host.layout import Layout

    release = render_release(config(gate_prompts=["one", "two"], gate_max_new_tokens=32,
                                    gate_on_inconclusive="pass"), "s", "p")
    layout = Layout(root=str(tmp_path))
    (tmp_path / "releases" / release.release_id).mkdir(parents=True)
    (tmp_path / "releases" / release.release_id / "gate.json").write_text(release.settings["gate.json"][0])
    loaded = GateSettings.load(release.release_id, layout)
    assert (loaded.prompts, loaded.max_new_tokens, loaded.on_inconclusive) == (("one", "two"), 32, "pass")


def test_release_json_holds_what_the_host_tool_reads():
    release = render_release(config(listen_host="0.0.0.0"), "dev-0123456789ab", "p1")
    meta = json.loads(release.release_json)
    assert meta["release_id"] == release.release_id and meta["stack"] == "dev-0123456789ab"
    assert meta["launch"]["listen_host"] == "0.0.0.0" and meta["launch"]["listen_port"] == 30000
    assert meta["launch"]["speculative_algorithm"] == "EAGLE3" and meta["launch"]["enable_metrics"] is True
    assert set(release.files) == {"launch", "launch.args", "release.json"}
    assert release.files["launch"][1] == 0o755
    assert "--speculative-num-steps 3\n" in release.args_text


def test_standin_release_runs_the_standin_with_its_warmup():
    script = render_release(config(server="standin", gpu_less=True, standin_warmup_s=2,
                                   standin_spec_accept_length=1.2), "s", "p").launch_script
    assert "export SGLFLEET_STANDIN_WARMUP=2\n" in script
    assert "export SGLFLEET_STANDIN_SPEC_ACCEPT_LENGTH=1.2\n" in script
    assert "SGLFLEET_STANDIN_TIME_SCALE" not in script  # sglang's own timing unless asked
    assert f'{LAYOUT.python("s")} {LAYOUT.standin}/sglang_standin.py ' '"${args[@]}" &' in script
    fast = render_release(config(server="standin", gpu_less=True, standin_time_scale=0.1), "s", "p")
    assert "export SGLFLEET_STANDIN_TIME_SCALE=0.1\n" in fast.launch_script


# A server that ends as sglang does: on SIGTERM it drains, then SIGKILLs itself
# (0.5.9 tokenizer_manager.py:2113-2149); "crash" exits 3 on its own.
SELF_KILLING_SERVER = """#!/usr/bin/env python3
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.2), os.kill(os.getpid(), signal.SIGKILL)))
ignored = [name for name in ("SIGINT", "SIGQUIT") if signal.getsignal(getattr(signal, name)) == signal.SIG_IGN]
open(os.environ["RUNTIME_DIRECTORY"] + "/server.ignores", "w").write(" ".join(ignored))
open(os.environ["RUNTIME_DIRECTORY"] + "/server.pid", "w").write(str(os.getpid()))
if os.environ.get("MODE") == "crash":
    time.sleep(0.3)
    sys.exit(3)
while True:
    time.sleep(1)
"""


@pytest.fixture
def started(tmp_path):
    """Start the real launch script, with sglang replaced by ``SELF_KILLING_SERVER``, from releases/abc123/."""
    server = tmp_path / "server"
    server.write_text(SELF_KILLING_SERVER)
    server.chmod(0o755)
    script = render_release(config(), "s", "p").launch_script
    script = script.replace(f"{LAYOUT.python('s')} -m sglang.launch_server", str(server))
    folder = tmp_path / "releases" / "abc123"
    folder.mkdir(parents=True)
    (folder / "launch").write_text(script)
    (folder / "launch").chmod(0o755)
    (tmp_path / "current").symlink_to("releases/abc123")
    procs = []

    def start(mode="serve"):
        env = {"PATH": os.environ["PATH"], "RUNTIME_DIRECTORY": str(tmp_path), "MODE": mode}
        proc = subprocess.Popen([str(tmp_path / "current" / "launch")], env=env)
        procs.append(proc)
        deadline = time.monotonic() + 10
        while not (tmp_path / "server.pid").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the server never started"
            time.sleep(0.02)
        time.sleep(0.1)
        proc.server_pid = int((tmp_path / "server.pid").read_text())
        (tmp_path / "server.pid").unlink()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        # And its server: killing the script alone leaves it running (systemd would kill the group).
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.server_pid, signal.SIGKILL)


def test_a_stop_asked_for_ends_the_launch_script_with_success(started):
    launch = started()
    # The unit's main process carries its release from the start (the host tool reads it there).
    environ = open(f"/proc/{launch.pid}/environ", "rb").read().split(b"\0")
    assert b"SGLFLEET_RELEASE=abc123" in environ
    launch.send_signal(signal.SIGTERM)  # systemctl stop, with KillMode=mixed
    assert launch.wait(10) == 0  # the server's own SIGKILL after the drain is a clean stop


def test_the_server_starts_with_no_signal_ignored(started, tmp_path):
    # sglang's children tell it of a failure by SIGQUIT (0.5.9 managers/scheduler.py:3191,
    # entrypoints/engine.py:862-874): a background job of a shell without job control would
    # start with SIGINT and SIGQUIT ignored, and pass that on to them.
    started().send_signal(signal.SIGTERM)
    assert (tmp_path / "server.ignores").read_text() == ""


def test_a_crash_or_a_kill_nobody_asked_for_stays_a_failure(started):
    assert started("crash").wait(10) == 3
    launch = started()
    os.kill(launch.server_pid, signal.SIGKILL)  # the OOM killer, say
    assert launch.wait(10) == -signal.SIGKILL  # the script ends by the same signal: Restart= applies


def test_the_standins_0514_stop_is_a_clean_stop_of_the_launch_script(tmp_path):
    """The real launch script running the stand-in over 0.5.14's files, as the local fleet runs it
    (scale 0.1): a stop waits out its silent window (the port taken, nothing answered) and its own
    SIGKILL, and the script, which counts that as sglang's end, exits 0."""
    import sys
    import urllib.request

    from test_server_flags import python_tree
    from test_standin import STANDIN, free_port, wait_for

    port = free_port()
    script = render_release(config(server="standin", gpu_less=True, standin_warmup_s=0.2, standin_compile_s=0,
                                   standin_sampling_jit_s=0, standin_time_scale=0.1, listen_port=port), "s", "p").launch_script
    script = script.replace(f"{LAYOUT.python('s')} {LAYOUT.standin}/sglang_standin.py", f"{sys.executable} {STANDIN}")
    script = script.replace(LAYOUT.compile_cache("s"), str(tmp_path / "compile"))
    launch = tmp_path / "launch"
    launch.write_text(script)
    launch.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "RUNTIME_DIRECTORY": str(tmp_path), "PYTHONPATH": str(python_tree("0.5.14")),
           "SGLFLEET_STANDIN_FAULT_FILE": str(tmp_path / "fault")}
    log = tmp_path / "journal"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(launch)], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        proc.url, proc.port = f"http://127.0.0.1:{port}", port
        wait_for(proc)
        proc.send_signal(signal.SIGTERM)  # systemctl stop, with KillMode=mixed
        unanswered = 0
        while proc.poll() is None:
            try:
                urllib.request.urlopen(proc.url + "/health", timeout=0.3).close()
            except TimeoutError:
                unanswered += 1  # the schedulers' exit: taken, not answered
            except OSError:
                pass  # 503 while it drains; a reset or a refusal at its end
        assert unanswered >= 2, "no silent window"
        assert proc.wait(10) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def launch_with(tmp_path, server: str):
    """The real launch script in ``tmp_path``, with sglang replaced by the bash script ``server``."""
    probe = tmp_path / "server"
    probe.write_text("#!/bin/bash\n" + server)
    probe.chmod(0o755)
    script = render_release(config(), "s", "p").launch_script
    launch = tmp_path / "launch"
    launch.write_text(script.replace(f"{LAYOUT.python('s')} -m sglang.launch_server", str(probe)))
    launch.chmod(0o755)
    return launch, probe


def test_launch_script_passes_the_api_key_in_a_private_file_not_in_argv(tmp_path):
    # Run the real script with its python replaced by a probe that reports what it got.
    launch, _ = launch_with(tmp_path, "printf '%s\\n' \"$@\" > \"$RUNTIME_DIRECTORY/argv\"\n"
                                      "env > \"$RUNTIME_DIRECTORY/env\"\n")
    key = "k3y-with-'quote"
    env = {"PATH": os.environ["PATH"], "RUNTIME_DIRECTORY": str(tmp_path), "SGLANG_API_KEY": key}
    subprocess.run([str(launch)], env=env, check=True, timeout=30)

    argv = (tmp_path / "argv").read_text().splitlines()
    assert key not in "\n".join(argv) and "--api-key" not in argv
    assert argv[-2:] == ["--config", str(tmp_path / "secrets.yaml")]
    assert argv[:2] == ["--model-path", "moonshotai/Kimi-K2.5"]
    # YAML single-quoted scalar: a quote is doubled.
    assert (tmp_path / "secrets.yaml").read_text() == "api-key: 'k3y-with-''quote'\n"
    assert oct((tmp_path / "secrets.yaml").stat().st_mode & 0o777) == "0o600"
    assert "SGLANG_API_KEY" not in (tmp_path / "env").read_text()


def test_what_the_server_prints_reaches_the_journal_with_the_api_key_blanked(tmp_path):
    """sglang logs its ServerArgs, api_key and all (0.5.9 entrypoints/engine.py:1031): the script filters it."""
    launch, server = launch_with(tmp_path, "echo \"server_args=ServerArgs(api_key='$KEY', port=30000)\"\n"
                                           "echo \"twice: $KEY $KEY.\" >&2\necho done\n")
    key = "sk-a.b*c[d]\\e&f"  # regex and sed metacharacters: the filter matches the text as it is
    env = {"PATH": os.environ["PATH"], "RUNTIME_DIRECTORY": str(tmp_path), "SGLANG_API_KEY": key, "KEY": key}
    done = subprocess.run([str(launch)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["server_args=ServerArgs(api_key='<redacted>', port=30000)",
                                        "twice: <redacted> <redacted>.", "done"]
    assert done.stderr == ""  # stderr goes through the filter too
    # Without a key nothing is filtered, and nothing stands between the server and the journal.
    plain = subprocess.run([str(launch)], env={**env, "SGLANG_API_KEY": ""}, capture_output=True, text=True,
                           timeout=30)
    assert f"api_key='{key}'" in plain.stdout
    # Line by line as the server writes, not held until a buffer fills or the server ends.
    server.write_text("#!/bin/bash\necho \"first $KEY\"\nsleep 20\n")
    proc = subprocess.Popen([str(launch)], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        assert ready and proc.stdout.readline() == "first <redacted>\n"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_launch_script_exports_the_release_it_was_started_from(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("#!/bin/bash\necho \"$SGLFLEET_RELEASE\" > \"$RUNTIME_DIRECTORY/release\"\n")
    probe.chmod(0o755)
    script = render_release(config(), "s", "p").launch_script
    script = script.replace(f"{LAYOUT.python('s')} -m sglang.launch_server", str(probe))
    (tmp_path / "releases" / "abc123").mkdir(parents=True)
    (tmp_path / "releases" / "abc123" / "launch").write_text(script)
    (tmp_path / "releases" / "abc123" / "launch").chmod(0o755)
    (tmp_path / "current").symlink_to("releases/abc123")
    env = {"PATH": os.environ["PATH"], "RUNTIME_DIRECTORY": str(tmp_path)}
    subprocess.run([str(tmp_path / "current" / "launch")], env=env, check=True, timeout=30)
    assert (tmp_path / "release").read_text() == "abc123\n"


def test_the_host_checks_a_release_against_its_id(tmp_path):
    from sglfleet.host.layout import Layout
    from sglfleet.host.releases import matches_id

    release = render_release(config(), "dev-0123456789ab", "p1")
    layout = Layout(root=str(tmp_path))
    folder = tmp_path / "releases" / release.release_id
    folder.mkdir(parents=True)
    for name, (text, _) in {**release.files, **release.settings}.items():
        (folder / name).write_text(text)
    (folder / "verdict.json").write_text("{}")  # written by the host tool: not part of the id
    assert matches_id(release.release_id, layout)
    # One flag added by hand to launch.args, or to release.json: the release is no longer itself.
    for name in ("launch.args", "release.json", "launch"):
        original = (folder / name).read_text()
        (folder / name).write_text(original.replace("--tp-size", "--tp-size 4 --tp-size"))
        assert not matches_id(release.release_id, layout), name
        (folder / name).write_text(original)
    assert not matches_id("0000000000000000", layout)


def test_the_inventorys_gate_defaults_are_the_host_tools():
    """A release without gate.json (an older controller's) is judged as the inventory's defaults judge."""
    defaults = runpy.run_path(str(PROJECT_ROOT / "inventory" / "group_data" / "all.py"))
    config = validate_host_data("node1", {**defaults, **BASE})
    assert gate_settings(config) == GateSettings()
    # Every setting travels: a field without its inventory key would fail validation above.
    assert {f"gate_{f.name}" for f in fields(GateSettings) if f.name != "extra"} <= set(defaults)


def test_the_host_tools_textfile_folder_is_the_inventorys_default():
    """The host tool's --textfile-dir, when a command line gives none, is all.py's textfile_dir."""
    from sglfleet.host.textfile import DEFAULT_DIR
    assert DEFAULT_DIR == runpy.run_path(str(PROJECT_ROOT / "inventory" / "group_data" / "all.py"))["textfile_dir"]
