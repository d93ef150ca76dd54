"""
The stand-in's ``POST /update_weights_from_disk`` held to sglang 0.5.14's on an H200 (issue 43):
``tests/data/gpu/weight-updates-h200-sglang-0.5.14.json`` (``bench/gpu_weight_updates.py``).

Each test replays one of the record's servers against a local stand-in process over the real sglang
wheel's files (0.5.14's for the record's behaviour, 0.5.9's where it differs by reading), with two
revisions of one model (the same names and shapes, other bytes) and an EAGLE-3 draft whose first
layer takes twice the hidden size, as the record's did. What is compared exactly: the answers' status
and bodies, the abort's finish_reason, the routes' fields; by kind: that a stream in flight finishes
on the old weights, that the server then says what one started from the new revision says, and how
the EAGLE-3 update ends the server.
"""

import http.client
import json
import re
import threading
import time
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.devfleet.mirror import write_model
from test_server_flags import python_tree
from test_standin import get, launch, sglang_059, wait_for  # noqa: F401  (fixtures)

RECORD = json.loads((PROJECT_ROOT / "tests" / "data" / "gpu" / "weight-updates-h200-sglang-0.5.14.json").read_text())
PLAIN, EAGLE = RECORD["servers"]["plain"], RECORD["servers"]["eagle"]
ADMIN = RECORD["admin_key_rules"]
# The record's models: the target's attention and the draft's first layer, which takes 2 x hidden inputs.
TARGET = {"model.layers.0.self_attn.k_proj.weight": (128, 64)}
DRAFT = {"midlayer.self_attn.k_proj.weight": (128, 128)}
EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
          "--speculative-num-draft-tokens", "4"]
KEY, ADMIN_KEY = "sk-weights", "sk-weights-admin"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("revisions")
    return {"rev-a": write_model(root / "rev-a", seed=1, shard_sizes=(4096, 4096), extra_tensors=TARGET),
            "rev-b": write_model(root / "rev-b", seed=2, shard_sizes=(4096, 4096), extra_tensors=TARGET),
            "rev-draft": write_model(root / "rev-draft", seed=3, shard_sizes=(4096,), extra_tensors=DRAFT,
                                 architecture="LlamaForCausalLMEagle3")}


@pytest.fixture(scope="module")
def sglang_0514() -> Path:
    """sglang 0.5.14's Python files (its server_args.py and version): the record's release."""
    return python_tree("0.5.14")


def start(launch, site, models, model="rev-a", *flags, **env):
    proc = launch(site, "--model-path", str(models[model]), "--served-model-name", "tiny-llama",
                  *flags, SGLFLEET_STANDIN_STEP_S="0.01", **env)
    wait_for(proc, "/health")
    return proc


def auth(key):
    return {"Authorization": f"Bearer {key}"} if key else {}


def update(proc, body: dict, key=None) -> tuple[int, dict]:
    status, text = get(proc.url + "/update_weights_from_disk", headers=auth(key), body=body, timeout=60)
    return status, json.loads(text)


def greedy(proc, prompt="The capital of France is", tokens=32, key=None) -> dict:
    status, text = get(proc.url + "/generate", headers=auth(key), body={
        "text": prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}})
    assert status == 200, text
    return json.loads(text)


class Stream(threading.Thread):
    """A streamed greedy /generate, read event by event, with when each came; ``reached`` after ``wanted``."""

    def __init__(self, proc, tokens: int, wanted: int, key=None):
        super().__init__(daemon=True)
        self.proc, self.tokens, self.key = proc, tokens, key
        self.events: list[dict] = []
        self.done_at = None
        self.reached = threading.Event()
        self.wanted = wanted

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proc.port, timeout=60)
        conn.request("POST", "/generate", body=json.dumps({
            "text": "Write a long story about a lighthouse keeper.", "stream": True,
            "sampling_params": {"max_new_tokens": self.tokens, "temperature": 0}}), headers=auth(self.key))
        response = conn.getresponse()
        for line in response:
            line = line.strip()
            if line == b"data: [DONE]":
                self.done_at = time.monotonic()
            elif line.startswith(b"data: "):
                self.events.append(json.loads(line[6:]))
                if len(self.events) >= self.wanted:
                    self.reached.set()
        self.reached.set()


def later(call) -> dict:
    """``call()`` in a thread: its answer (or the error it raised) and when it came."""
    out: dict = {}

    def run():
        try:
            out["answer"] = call()
        except Exception as error:  # a connection the server closed unanswered
            out["error"] = error
        out["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    out["thread"] = thread
    return out


def as_recorded(value, models: dict):
    """A value of ours with our folders named as the record's (``/tmp/rev-a``, ...)."""
    text = json.dumps(value)
    for name, folder in models.items():
        text = text.replace(str(folder), f"/tmp/{name}")
    return json.loads(text)


def test_an_update_waits_for_the_stream_in_flight_which_ends_on_the_old_weights(launch, sglang_0514, models):
    recorded = PLAIN["update_in_flight"]
    proc = start(launch, sglang_0514, models)
    alone = greedy(proc, "Write a long story about a lighthouse keeper.", 200)["text"]
    stream = Stream(proc, 200, recorded["stream_events_when_update_sent"])
    stream.start()
    stream.reached.wait(30)
    answer = later(lambda: update(proc, recorded["update_body"] | {"model_path": str(models["rev-b"])}))
    time.sleep(0.05)
    late = later(lambda: greedy(proc))
    answer["thread"].join(30)
    late["thread"].join(30)
    stream.join(30)

    assert answer["answer"] == (recorded["update"]["status"], recorded["update"]["json"])
    # The stream neither paused for the update nor was cut: every token, rev A's own words, version default.
    last = stream.events[-1]
    assert (len(stream.events), last["meta_info"]["finish_reason"]) == (200, {"type": "length", "length": 200})
    assert (last["text"], last["meta_info"]["weight_version"]) == (alone, recorded["stream"]["weight_version"])
    # The update was answered once the stream had ended, the late request after the update, on rev B.
    assert stream.done_at <= answer["at"] <= late["at"]
    assert late["answer"]["meta_info"]["weight_version"] == recorded["late_request"]["meta_info"]["weight_version"]


def test_after_an_update_it_says_what_a_server_started_from_the_revision_says(launch, sglang_0514, models):
    proc = start(launch, sglang_0514, models)
    fresh_b = start(launch, sglang_0514, models, "rev-b")
    before = greedy(proc)["text"]
    assert update(proc, {"model_path": str(models["rev-b"]), "weight_version": "rev-b"})[0] == 200
    after = greedy(proc)
    assert after["text"] == greedy(fresh_b)["text"] != before  # the record: logprobs equal to fresh_b's, 0.0 apart
    assert after["meta_info"]["weight_version"] == "rev-b"
    # What the routes say, field by field as the record's server said them after its update.
    info = json.loads(get(proc.url + "/model_info")[1])
    assert as_recorded(info, models) == PLAIN["after"]["/model_info"]["json"]
    server = json.loads(get(proc.url + "/server_info")[1])
    fields = PLAIN["after"]["/server_info"]["fields"]
    assert as_recorded({k: server.get(k) for k in fields if k not in ("version", "load_format")}, models) == \
        {k: v for k, v in fields.items() if k not in ("version", "load_format")}
    models_list = json.loads(get(proc.url + "/v1/models")[1])
    assert [card["id"] for card in as_recorded(models_list, models)["data"]] == \
        [card["id"] for card in PLAIN["after"]["/v1/models"]["json"]["data"]]  # the path, not the served name
    # The OpenAI route still takes the served name, and the path; each echoed back.
    for case in ("old_name", "path_as_name"):
        body = json.loads(PLAIN["served_name_after"][case]["request"]["body"])
        body["model"] = str(models["rev-b"]) if case == "path_as_name" else body["model"]
        status, text = get(proc.url + "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        answer = json.loads(text)
        assert (status, as_recorded(answer["model"], models), answer["metadata"]) == (
            PLAIN["served_name_after"][case]["status"], PLAIN["served_name_after"][case]["json"]["model"],
            PLAIN["served_name_after"][case]["json"]["metadata"])


def test_abort_all_requests_ends_the_stream_at_once_and_cleanly(launch, sglang_0514, models):
    recorded = PLAIN["update_back_aborting"]
    proc = start(launch, sglang_0514, models, "rev-b")
    stream = Stream(proc, 400, recorded["stream_events_when_update_sent"])
    stream.start()
    stream.reached.wait(30)
    status, body = update(proc, recorded["update_body"] | {"model_path": str(models["rev-a"])})
    stream.join(30)
    assert (status, body) == (recorded["update"]["status"], recorded["update"]["json"])
    last = stream.events[-1]["meta_info"]
    assert last["finish_reason"] == recorded["stream"]["finish_reason"]
    assert len(stream.events) < 400 and stream.done_at is not None  # cut short, and [DONE]: cleanly framed
    assert greedy(proc)["meta_info"]["weight_version"] == "rev-a-again"


def test_a_path_that_does_not_exist_is_refused_and_changes_nothing(launch, sglang_0514, models):
    recorded = PLAIN["update_missing_path"]["answer"]
    proc = start(launch, sglang_0514, models)
    before = greedy(proc)
    assert update(proc, json.loads(recorded["request"]["body"])) == (recorded["status"], recorded["json"])
    assert greedy(proc)["text"] == before["text"]
    assert json.loads(get(proc.url + "/model_info")[1])["weight_version"] == "default"
    assert get(proc.url + "/health")[0] == PLAIN["health_at_end"]["status"]


def test_with_eagle3_on_0514_the_update_loads_the_draft_from_the_same_path_and_the_server_dies(
        launch, sglang_0514, models):
    recorded = EAGLE["update_in_flight"]
    proc = start(launch, sglang_0514, models, "rev-a", *EAGLE3, "--speculative-draft-model-path",
                 str(models["rev-draft"]), "--api-key", KEY)
    refused = EAGLE["update_without_key"]
    assert update(proc, json.loads(refused["request"]["body"])) == (refused["status"], refused["json"])
    stream = Stream(proc, 200, 20, key=KEY)  # EAGLE-3 steps: the record's 64 events came 64 tokens in
    stream.start()
    stream.reached.wait(30)
    answer = later(lambda: update(proc, recorded["update_body"] | {"model_path": str(models["rev-b"])}, key=KEY))
    time.sleep(0.05)
    late = later(lambda: greedy(proc, key=KEY))
    stream.join(30)
    answer["thread"].join(30)
    late["thread"].join(30)
    _, err = proc.communicate(timeout=30)
    # The stream had finished first, on rev A; the update and the late request got a closed connection.
    last = stream.events[-1]["meta_info"]
    assert (last["completion_tokens"], last["weight_version"]) == (200, recorded["stream"]["weight_version"])
    assert "answer" not in answer and "answer" not in late
    assert proc.returncode == EAGLE["end_after_update"]["exit_status"]  # -9: its own kill
    # The target loaded ("Update weights end."), then the draft's first layer refused the target's tensor:
    # twice the loaded shape's input, as in the record.
    died = [line for line in err.splitlines() if "AssertionError: param_data.shape=" in line]
    shape = re.compile(r"param_data\.shape=torch\.Size\(\[(\d+), (\d+)\]\) loaded_weight\.shape=torch\.Size\(\[(\d+), (\d+)\]\)")
    ours, theirs = shape.search(died[-1]).groups(), shape.search(EAGLE["log_tail"][7]).groups()
    assert int(ours[1]) == 2 * int(ours[3]) and int(theirs[1]) == 2 * int(theirs[3])
    assert err.index("Update weights end.") < err.index("Scheduler hit an exception")
    assert "Sleeping 5 seconds before crash diagnostics" in err


def test_with_both_keys_the_update_wants_the_admin_key_and_generations_the_api_key(launch, sglang_0514, models):
    proc = start(launch, sglang_0514, models, "rev-b", *EAGLE3, "--speculative-draft-model-path",
                 str(models["rev-draft"]), "--api-key", KEY, "--admin-api-key", ADMIN_KEY)
    body = json.loads(ADMIN["without_key"]["request"]["body"])
    body["model_path"] = str(models["rev-b"])
    assert update(proc, body) == (ADMIN["without_key"]["status"], ADMIN["without_key"]["json"])
    assert update(proc, body, key=KEY) == (ADMIN["with_api_key"]["status"], ADMIN["with_api_key"]["json"])
    assert get(proc.url + "/generate", headers=auth(ADMIN_KEY), body={"text": "Hi"})[0] == \
        ADMIN["generate_with_admin_key"]["status"]
    # The draft's folder "succeeds": the target takes the one tensor it has a parameter for, and serves wrong weights.
    before = greedy(proc, key=KEY)["text"]
    draft_update = json.loads(ADMIN["draft_path_update"]["request"]["body"]) | {"model_path": str(models["rev-draft"])}
    assert update(proc, draft_update, key=ADMIN_KEY) == (
        ADMIN["draft_path_update"]["status"], ADMIN["draft_path_update"]["json"])
    assert greedy(proc, key=KEY)["text"] != before
    assert as_recorded(json.loads(get(proc.url + "/model_info", headers=auth(KEY))[1])["model_path"],
                       models) == ADMIN["after_draft_path_update"]["model_info"]["json"]["model_path"]


def test_0509_reloads_the_target_alone_so_eagle3_survives_it(launch, sglang_059, models):
    """By reading 0.5.9 (scheduler_update_weights_mixin.py:46-56: tp_worker only); not on a GPU."""
    proc = start(launch, sglang_059, models, "rev-a", *EAGLE3, "--speculative-draft-model-path", str(models["rev-draft"]))
    fresh_b = start(launch, sglang_059, models, "rev-b", *EAGLE3, "--speculative-draft-model-path",
                    str(models["rev-draft"]))
    assert update(proc, {"model_path": str(models["rev-b"]), "weight_version": "rev-b"})[0] == 200
    assert greedy(proc)["text"] == greedy(fresh_b)["text"]
    assert proc.poll() is None


def test_the_update_fails_fault_refuses_any_folder_but_the_one_it_started_with(launch, sglang_059, models, tmp_path):
    """The local fleet's way to fail an update in place (``sglfleet devfleet fault <host> update-fails``)."""
    fault = tmp_path / "fault"
    fault.write_text("update-fails\nspare 0123\n")
    proc = start(launch, sglang_059, models, "rev-a", SGLFLEET_STANDIN_FAULT_FILE=str(fault))
    before = greedy(proc)["text"]
    status, body = update(proc, {"model_path": str(models["rev-b"]), "weight_version": "rev-b"})
    assert (status, body["success"]) == (400, False) and greedy(proc)["text"] == before
    assert update(proc, {"model_path": str(models["rev-a"]), "weight_version": "rev-a"})[0] == 200
