"""
A weights-only change, planned before any host changes (issue 43): which sglang may load a new revision
into its running server (``speculative_refusal``), which change is one (``weights_change``, over the
serving release's ``release.json`` as the host's read returns it and the new one's), what each host's
step will do with it (``decide``: an update, which restarts nothing and hands no compile caches on), and
how the host's read tells a process updated in place from one started with its release.
"""

import json

import pytest

from sglfleet.facts.gpu import Gpu
from sglfleet.facts.host import HostState
from sglfleet.facts.release import ReleaseHostState, ReleaseState
from sglfleet.facts.stack import StackHostState
from sglfleet.host.weights import served_in_place
from sglfleet.plan.release import render_release
from sglfleet.plan.rollout_plan import HostRollout, decide, plan_rollout
from sglfleet.plan.schema import validate_host_data
from sglfleet.plan.settings import LaunchSettings
from sglfleet.plan.weights import WeightsPolicy, speculative_refusal, weights_change

A, B, C = "a" * 40, "b" * 40, "c" * 40
DRAFT_A, DRAFT_B = "d" * 40, "e" * 40
STACK = "dev-0a24832cc36f"
BASE = {"stack": "dev", "model_path": "moonshotai/Kimi-K2.5", "model_revision": A,
        "speculative_draft_model_path": "lightseekorg/kimi-k2.5-eagle3", "speculative_draft_model_revision": DRAFT_A,
        "trust_remote_code": True, "tp_size": 8}
# The digest of config.json each pinned revision's manifest holds: A and B one file, C another.
CONFIGS = {("moonshotai/Kimi-K2.5", A): "cfg1", ("moonshotai/Kimi-K2.5", B): "cfg1",
           ("moonshotai/Kimi-K2.5", C): "cfg2", ("acme/kimi-k2.5-ft", B): "cfg1"}


def release_json(**data) -> str:
    config = validate_host_data("node1", {**BASE, **data})
    return render_release(config, STACK, "").release_json


def launch(**data) -> LaunchSettings:
    return validate_host_data("node1", {**BASE, **data}).launch


# sglang version, launch settings -> refused (a fragment of why), or None
REFUSALS = [
    ("0.5.9", {}, None),  # the target alone reloads (scheduler_update_weights_mixin.py:46-56)
    ("0.5.10.post1", {}, None),
    ("0.5.11", {}, "sglang 0.5.11 loads the EAGLE3 draft from the new model path"),
    ("0.5.14", {}, "sglang 0.5.14 loads the EAGLE3 draft"),  # the GPU record: exit -9
    ("0.5.23", {}, "sglang 0.5.23 loads the EAGLE3 draft"),
    (None, {}, "(unknown version) loads the EAGLE3 draft"),
    ("0.5.23", {"speculative_algorithm": None, "speculative_draft_model_path": None,
                "speculative_draft_model_revision": None}, None),  # no draft: every version updates in place
    ("0.5.9", {"disaggregation_mode": "decode"}, "PD roles restart"),
]


@pytest.mark.parametrize("version, data, refused", REFUSALS)
def test_which_sglang_may_update_in_place(version, data, refused):
    why = speculative_refusal(version, launch(**data))
    assert why is None if refused is None else refused in why


# the new release's data, the setting, its refusal -> in place, what the run says
CHANGES = [
    ({"model_revision": B}, "auto", None, True, "in place: only the weights change (aaaaaaaaaaaa -> bbbbbbbbbbbb)"),
    # another checkpoint of the same architecture (one config.json) is served under its own hub id: the name
    # clients ask for changes, which only a restart can do (test_another_checkpoint_... keeps the name)
    ({"model_path": "acme/kimi-k2.5-ft", "model_revision": B}, "auto", None, False,
     "restart: --served-model-name changes"),
    ({"model_revision": B}, "in_place", None, True, "in place: only the weights change"),
    ({"model_revision": B}, "restart", None, False, 'restart: only the weights change, and weights_update is "restart"'),
    ({"model_revision": B}, "auto", "sglang 0.5.14 loads the EAGLE3 draft", False,
     "restart: only the weights change, but sglang 0.5.14 loads the EAGLE3 draft"),
    # config.json differs: another architecture or other shapes, which sglang cannot load into the running model
    ({"model_revision": C}, "auto", None, False, "restart: the model changes (config.json differs between the revisions)"),
    # a flag changes in the same run: a restart, naming it
    ({"model_revision": B, "speculative_num_steps": 2, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3},
     "auto", None, False, "restart: speculative_eagle_topk, speculative_num_draft_tokens, speculative_num_steps change"),
    # the draft's own revision: its server was started with the old one
    ({"model_revision": B, "speculative_draft_model_revision": DRAFT_B}, "auto", None, False,
     "restart: --speculative-draft-model-path changes"),
    ({"model_revision": B, "stack": "dev-sglang-0.5.23"}, "auto", None, False, "restart: "),  # rendered on another stack below
    ({"served_model_name": "kimi"}, "auto", None, False, "restart: served_model_name changes"),
]


@pytest.mark.parametrize("data, setting, refusal, in_place, says", CHANGES)
def test_a_change_is_weights_only_where_the_checkpoint_alone_differs(data, setting, refusal, in_place, says):
    serving = json.loads(release_json())
    new = release_json(**data)
    if "stack" in data:
        new = json.dumps({**json.loads(new), "stack": "dev-sglang-0.5.23-1b2c"})
    change = weights_change(serving, WeightsPolicy(setting, refusal, new), lambda *model: CONFIGS.get(model))
    assert change.in_place == in_place
    assert change.says().startswith(says), change.says()
    if in_place:  # where the host finds the new weights, and what the server will say it serves
        assert change.model_path.endswith(f"/{data['model_revision']}") and change.weight_version == data["model_revision"]


def test_nothing_to_compare_where_nothing_serves_or_the_release_is_the_same():
    policy = WeightsPolicy("auto", None, release_json(model_revision=B))
    assert weights_change(None, policy) is None and weights_change({}, policy) is None
    assert weights_change(json.loads(release_json(model_revision=B)), policy) is None


def test_an_unpinned_model_or_one_without_manifests_restarts():
    unpinned = {"model_revision": None, "allow_unpinned_models": True}
    serving = json.loads(release_json(**unpinned))
    change = weights_change(serving, WeightsPolicy("auto", None, release_json(**unpinned, tp_size=4)))
    assert change.says() == "restart: tp_size changes"
    change = weights_change(json.loads(release_json()), WeightsPolicy("auto", None, release_json(model_revision=B)),
                            lambda *model: None)
    assert change.says() == "restart: the model changes (no manifest holds config.json of both revisions)"


# what the host holds and serves, the change in place -> what its step does
R, OLD = "3f2a9c1d0b7e6a55", "9c41d0e2a7b35f18"
DECISIONS = [
    (ReleaseHostState(current=OLD, serving=OLD, active_state="active"), False, True, "update"),
    (ReleaseHostState(current=OLD, serving=OLD, active_state="active"), True, True, "switch"),  # a rebuilt stack
    (ReleaseHostState(current=OLD, serving=OLD, active_state="failed"), False, True, "switch"),  # nothing runs
    (ReleaseHostState(current=R, serving=OLD, active_state="active"), False, True, "switch"),  # current moved
    (ReleaseHostState(current=OLD, serving=OLD, active_state="active", busy=True), False, True, "wait"),
    (ReleaseHostState(current=R, serving=R, active_state="active"), False, True, "noop"),  # updated already
    (ReleaseHostState(current=OLD, serving=OLD, active_state="active"), False, False, "switch"),
]


@pytest.mark.parametrize("found, rebuilt, in_place, action", DECISIONS)
def test_the_step_updates_in_place_only_a_running_process_that_serves_its_current_release(
        found, rebuilt, in_place, action):
    assert decide(found, R, rebuilt, 0, in_place) == action


def test_an_update_restarts_nothing_and_hands_no_compile_caches_on(monkeypatch):
    serving = json.loads(release_json())
    policy = WeightsPolicy("auto", None, release_json(model_revision=B))
    gpus = [Gpu("H200", "580.95.05", "9.0", 143771)]
    stack = StackHostState(stack_id=STACK, marker={"stack_id": STACK, "ok": True}, venv=True)

    def host(weights):
        found = ReleaseHostState(current=OLD, serving=OLD, active_state="active", current_release=serving)
        return HostRollout(found=HostState(gpus=gpus, stack=stack, release=found, services={"sglang": found}),
                           releases={"sglang": R}, stack_id=STACK, weights=weights)

    monkeypatch.setattr("sglfleet.plan.weights.manifest_config", lambda *model: CONFIGS.get(model))
    plan = plan_rollout([("n1",), ("n2",)], {"n1": host({"sglang": policy}), "n2": host({"sglang": policy})})
    restarting = plan_rollout([("n1",), ("n2",)], {"n1": host({}), "n2": host({})})
    assert plan.actions == {"n1": {"sglang": "update"}, "n2": {"sglang": "update"}}
    assert not plan.restarts("n1") and not any(plan.later.values())
    assert restarting.actions["n1"] == {"sglang": "switch"} and restarting.later[("n1", "sglang")]


def read(verdict: dict, main_pid: int, since: str, started_with: str = OLD) -> ReleaseHostState:
    """The release part of a host's read, as the host answers its command."""
    return ReleaseState().process([
        f"current=/opt/sglfleet/releases/{R}", f"previous=/opt/sglfleet/releases/{OLD}", f"releases={OLD} {R}",
        f"verdict={json.dumps(verdict)}", 'release={"release_id": "%s", "args": ["--model-path", "/m"]}' % R,
        "drift=", "ActiveState=active", f"ActiveEnterTimestamp={since}", "NRestarts=0", f"MainPID={main_pid}",
        f"serving={started_with}"])


SINCE = "Fri 2026-12-04 18:05:00 UTC"


def test_the_read_says_a_process_updated_in_place_serves_the_current_release():
    updated = {"in_place": {"pid": 4242, "since": SINCE, "from": OLD}}
    found = read(updated, 4242, SINCE)
    assert (found.serving, found.current_release["release_id"]) == (R, R)
    # Another process (a restart since, or a pid reused): what it was started with, as before.
    assert read(updated, 4243, SINCE).serving == OLD
    assert read(updated, 4242, "Fri 2026-12-04 19:00:00 UTC").serving == OLD
    assert read({}, 4242, SINCE).serving == OLD
    assert not served_in_place({"pid": 0, "since": SINCE}, 0, SINCE)


def test_another_checkpoint_under_the_name_clients_know_is_a_weights_change():
    """With ``served_model_name`` given, a fine-tune of the same architecture keeps the name, and loads in place."""
    named = {"served_model_name": "kimi-k2.5"}
    serving = json.loads(release_json(**named))
    new = release_json(**named, model_path="acme/kimi-k2.5-ft", model_revision=B)
    change = weights_change(serving, WeightsPolicy("auto", None, new), lambda *model: CONFIGS.get(model))
    assert change.in_place and change.says().startswith("in place: only the weights change"), change.says()


def test_a_pinned_model_is_served_under_its_hub_id_whatever_its_revision():
    """The staged folder names the revision: served under it, a new revision would change the name clients ask for."""
    for revision in (A, B):
        args = json.loads(release_json(model_revision=revision))["args"]
        assert args[args.index("--model-path") + 1].endswith(f"/moonshotai/Kimi-K2.5/{revision}")
        assert args[args.index("--served-model-name") + 1] == "moonshotai/Kimi-K2.5"

