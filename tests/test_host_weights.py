"""
The host tool's ``update RELEASE`` (``sglfleet.host.weights``) against a real stand-in process on this
machine, with the host's layout in a temporary folder and systemd's answers given by the test (the
unit's main process is the stand-in): the change checked on what the host holds, the weights loaded
with the admin key, the gate, the record the host's read takes as serving, and each way back.
"""

import json
import os
import signal

import pytest

from sglfleet.devfleet.mirror import write_model
from sglfleet.host import cli, releases, service, weights
from sglfleet.host.layout import Layout
from sglfleet.host.protocol import NOT_IN_PLACE, PASSED, ROLLED_BACK
from test_server_flags import python_tree
from test_standin import free_port, get, launch, sglang_059, wait_for  # noqa: F401  (fixtures)
from test_standin_weights import DRAFT, EAGLE3, TARGET

A, B, C, D = "a" * 40, "b" * 40, "c" * 40, "d" * 40
GATE = {"warmup_s": 30, "poll_s": 0.1, "prompts": ["The capital of France is"], "max_new_tokens": 8,
        "sampled_tokens": 2, "bake_s": 0}


class Host:
    """A host's layout under ``tmp``, its staged model revisions, and its unit as systemd would answer for it."""

    def __init__(self, tmp, launch, site, flags=(), keys=None):
        self.layout = Layout(root=str(tmp / "opt"), etc=str(tmp / "etc"))
        self.launch, self.site, self.flags, self.port = launch, site, list(flags), free_port()
        models = tmp / "opt" / "models" / "demo" / "tiny"
        self.models = {rev: write_model(models / rev, seed=n, shard_sizes=(4096, 4096), extra_tensors=TARGET)
                       for n, rev in enumerate((A, B, C), 1)}
        # D: A's config.json, a tensor of another shape (loading it would kill the server).
        self.models[D] = write_model(models / D, seed=4, shard_sizes=(4096, 8192), extra_tensors=TARGET)
        config = json.loads((self.models[C] / "config.json").read_text())
        (self.models[C] / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))  # other shapes
        self.draft = write_model(tmp / "opt" / "models" / "demo" / "draft" / ("d" * 40), seed=9, shard_sizes=(4096,),
                                 extra_tensors=DRAFT, architecture="LlamaForCausalLMEagle3")
        self.keys = keys or {}
        os.makedirs(self.layout.etc)
        with open(self.layout.env_file, "w") as env:
            env.writelines(f"{name}={value}\n" for name, value in self.keys.items())
        self.proc, self.started = None, 0

    def args(self, revision: str, extra=()) -> list[str]:
        draft = ["--speculative-draft-model-path", str(self.draft)] if "--speculative-algorithm" in self.flags else []
        return ["--model-path", str(self.models[revision]), *self.flags, *draft, "--host", "127.0.0.1",
                "--port", str(self.port), *extra]

    def stage(self, revision: str, extra=()) -> str:
        """A release of ``revision`` staged as the controller stages it; its id."""
        args = self.args(revision, extra)
        meta = {"stack": "dev-1", "patch": "", "service": "", "server": "standin", "args": args,
                "launch": {"listen_host": "127.0.0.1", "listen_port": self.port,
                           "speculative_algorithm": "EAGLE3" if "--speculative-algorithm" in self.flags else None}}
        files = {"launch": "#!/bin/bash\nexec sglang " + " ".join(args) + "\n",
                 "launch.args": "".join(arg + "\n" for arg in args), "release.json": json.dumps(meta)}
        release_id = releases.content_id({name: text.encode() for name, text in files.items()})
        folder = self.layout.release(release_id)
        os.makedirs(folder, exist_ok=True)
        for name, text in {**files, "release.json": json.dumps({**meta, "release_id": release_id}),
                           "gate.json": json.dumps(GATE)}.items():
            with open(os.path.join(folder, name), "w") as handle:
                handle.write(text)
        return release_id

    def start(self, release_id: str, revision: str):
        """The unit's start of ``release_id``: a stand-in of its revision, its pid the unit's main process."""
        keys = [arg for name, flag in (("SGLANG_API_KEY", "--api-key"), ("SGLANG_ADMIN_API_KEY", "--admin-api-key"))
                if name in self.keys for arg in (flag, self.keys[name])]
        self.proc = self.launch(self.site, *self.args(revision), *keys, SGLFLEET_STANDIN_STEP_S="0.005")
        self.proc.url = f"http://127.0.0.1:{self.port}"
        wait_for(self.proc, "/health")
        self.release, self.started = release_id, self.started + 1
        releases.point(self.layout.current, release_id)

    def properties(self, layout=None) -> dict:
        alive = self.proc is not None and self.proc.poll() is None
        return {"ActiveState": "active" if alive else "failed", "SubState": "running" if alive else "failed",
                "MainPID": str(self.proc.pid) if alive else "0", "NRestarts": "0",
                "ActiveEnterTimestamp": f"start {self.started}"}


@pytest.fixture
def host(tmp_path, launch, sglang_059, monkeypatch):
    def make(site=sglang_059, flags=(), keys=None):
        made = Host(tmp_path, launch, site, flags, keys)
        monkeypatch.setattr(service, "properties", made.properties)
        monkeypatch.setattr(service, "main_pid_environ", lambda layout=None: {"SGLFLEET_RELEASE": made.release})
        monkeypatch.setattr(service, "journal_tail", lambda layout=None: "(the test's journal)")
        return made
    return make


def info(host: Host) -> dict:
    key = host.keys.get("SGLANG_API_KEY")
    return json.loads(get(host.proc.url + "/model_info", headers={"Authorization": f"Bearer {key}"} if key else {})[1])


def test_an_update_loads_the_revision_into_the_running_server_and_is_recorded_as_serving(host, capsys):
    h = host(keys={"SGLANG_API_KEY": "sk-api", "SGLANG_ADMIN_API_KEY": "sk-admin"})  # the route wants the admin key
    old, new = h.stage(A), h.stage(B)
    h.start(old, A)
    pid = h.proc.pid
    assert weights.update(new, h.layout) == PASSED, capsys.readouterr().err
    assert (h.proc.pid, h.proc.poll()) == (pid, None)  # no restart
    assert (info(h)["weight_version"], info(h)["model_path"]) == (B, str(h.models[B]))
    assert (releases.release_id_of(h.layout.current), releases.release_id_of(h.layout.previous)) == (new, old)
    verdict = releases.read(new, "verdict.json", h.layout)
    assert verdict["in_place"]["pid"] == str(pid) and verdict["startup"]["passed"] and verdict["switched"]["in_place"]
    assert weights.serving(h.layout) == new and weights.served_revision(new, h.layout) == B
    result = [json.loads(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()
              if line.startswith("sglfleet-result")][-1]
    assert result["in_place"] and result["figures"]["requests"] == 1 and result["figures"]["update_s"] >= 0
    # Once more: nothing to do.
    assert weights.update(new, h.layout) == PASSED
    assert '"already": true' in capsys.readouterr().out


@pytest.mark.parametrize("revision, extra, why", [
    (C, (), "config.json differs (num_hidden_layers)"),
    (D, (), "the tensors' shapes differ (model.layers.2.bias, model.layers.2.weight)"),
    (B, ("--tp-size", "2"), "its launch changes beyond the model's folder"),
    (A, ("--tp-size", "2"), "its model folder does not change"),
])
def test_a_change_that_is_not_weights_only_on_the_host_changes_nothing(host, capsys, revision, extra, why):
    h = host()
    old = h.stage(A)
    h.start(old, A)
    assert weights.update(h.stage(revision, extra), h.layout) == NOT_IN_PLACE
    assert why in capsys.readouterr().err
    assert releases.release_id_of(h.layout.current) == old and info(h)["weight_version"] == "default"


def test_an_update_that_is_not_one_keeps_its_release_for_the_switch_that_follows(host, tmp_path):
    """``--keep 0`` collects after an update; one that moved nothing must leave the release it was asked for."""
    h = host()
    old = h.stage(A)
    h.start(old, A)
    new = h.stage(D)
    argv = ["--keep", "0", "--wait-lock", "1", "--textfile-dir", str(tmp_path / "none"), "update", new]
    assert cli.main(argv, h.layout) == NOT_IN_PLACE
    assert releases.staged(new, h.layout) and releases.release_id_of(h.layout.current) == old


def test_a_server_that_dies_loading_the_update_is_restarted_on_its_old_release(host, capsys, monkeypatch):
    """sglang 0.5.14 with EAGLE-3 loads the draft from the new path and dies (the GPU record): the old release restarts."""
    h = host(site=python_tree("0.5.14"), flags=EAGLE3)
    old, new = h.stage(A), h.stage(B)
    h.start(old, A)
    dead = h.proc
    monkeypatch.setattr(service, "restart", lambda layout=None: h.start(old, A) or 0)
    assert weights.update(new, h.layout) == ROLLED_BACK
    assert dead.wait(30) == -signal.SIGKILL
    err = capsys.readouterr().err
    assert "the server closed the connection" in err and f"restarted {old}, which serves again" in err
    assert releases.release_id_of(h.layout.current) == old and weights.serving(h.layout) == old
    assert info(h)["model_path"] == str(h.models[A])
    assert releases.read(new, "verdict.json", h.layout)["startup"] == {
        **releases.read(new, "verdict.json", h.layout)["startup"], "passed": False, "in_place": True}


def test_a_gate_that_fails_after_the_update_loads_the_old_weights_back_in_place(host, capsys, monkeypatch):
    h = host()
    old, new = h.stage(A), h.stage(B)
    h.start(old, A)
    pid = h.proc.pid
    real = weights.startup
    calls = []

    def failing_once(release, settings, restarts, layout):
        calls.append(release["release_id"])
        if len(calls) == 1:
            raise weights.GateFailed("generate", "the test's first gate fails")
        return real(release, settings, restarts, layout)

    monkeypatch.setattr(weights, "startup", failing_once)
    assert weights.update(new, h.layout) == ROLLED_BACK
    assert f"updated back to {old} in place, which serves again" in capsys.readouterr().err
    assert (h.proc.pid, info(h)["weight_version"], info(h)["model_path"]) == (pid, A, str(h.models[A]))
    assert releases.release_id_of(h.layout.current) == old and weights.serving(h.layout) == old
