"""The H200 records of bench/gpu_pd.py: a prefill/decode pair over nixl behind a PD load balancer
(issue 31), and a server started from 0.5.14's server_args.py patched by sglfleet (issue 33).

What each record says is held here against itself and against sglfleet's code now: the patched
file is what ``apply_sets`` writes on the wheel's file today, the logged ``ServerArgs`` lacks the
key, and each request through the balancer reached both roles with one bootstrap room.
"""

import hashlib
import json
import re

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts import patchsets
from sglfleet.artifacts.patcher import unified_diff
from sglfleet.artifacts.upstream import sglang_file

GPU = PROJECT_ROOT / "tests" / "data" / "gpu"
PD = json.loads((GPU / "pd-h200-sglang-0.5.14.json").read_text())
PATCH = json.loads((GPU / "patchset-h200-sglang-0.5.14.json").read_text())
SERVER_ARGS = "sglang/srt/server_args.py"


def log(name: str) -> str:
    return (GPU / f"{name}.log").read_text()


def test_the_gpu_ran_the_file_sglfleet_writes_today():
    wheel = sglang_file("0.5.14", SERVER_ARGS).read_bytes()
    sets = patchsets.for_file(patchsets.load_sets(), "0.5.14", SERVER_ARGS)
    new, outcomes = patchsets.apply_sets(wheel, sets)
    record = PATCH["patch"]
    assert [s.name for s in sets] == record["sets"] == ["api_key_not_logged_annotated"]
    assert {s.name: outcome for s, outcome in outcomes} == record["outcomes"] == {
        "api_key_not_logged_annotated": "applies"}
    assert hashlib.sha256(wheel).hexdigest() == record["sha256_wheel"] == record["sha256_site_original_after"]
    assert hashlib.sha256(new).hexdigest() == record["sha256_patched"]
    assert record["diff"] == unified_diff(wheel, new, SERVER_ARGS)
    assert record["second_apply_unchanged"] and record["verify_failures"] == {"api_key_not_logged_annotated": []}


def test_the_patched_server_served_and_logged_no_key():
    assert "--api-key" in PATCH["flags"]
    assert PATCH["health"]["ready"]
    requests = PATCH["requests"]
    assert requests["models_with_key"]["status"] == 200
    assert requests["models_without_key"]["status"] == 401
    assert requests["generate_with_key"]["status"] == 200
    assert requests["generate_with_key"]["json"]["meta_info"]["completion_tokens"] == 16
    line = PATCH["server_args_line"]
    assert line.startswith("[2026-12-02 07:45:") and "server_args=ServerArgs(" in line
    assert "api_key=" not in line and "admin_api_key" not in line  # repr=False leaves both out
    text = log("patchset-h200-sglang-0.5.14")
    key = PATCH["flags"][PATCH["flags"].index("--api-key") + 1]
    assert key not in text and not PATCH["key_in_log"]


def test_the_unpatched_roles_log_the_field():
    # The same site, unpatched: both roles' ServerArgs line has the field (no key was given them).
    for role in ("prefill", "decode"):
        line = next(ln for ln in log(f"pd-h200-sglang-0.5.14-{role}").splitlines() if "server_args=ServerArgs(" in ln)
        assert "api_key=None" in line and "admin_api_key=None" in line


def test_each_request_through_the_balancer_reached_both_roles_with_one_room():
    assert "--mini-lb" in PD["lb_flags"] and "--pd-disaggregation" in PD["lb_flags"]
    for role, mode in (("prefill", "prefill"), ("decode", "decode")):
        flags = PD["flags"][role]
        assert flags[flags.index("--disaggregation-mode") + 1] == mode
        assert flags[flags.index("--disaggregation-transfer-backend") + 1] == "nixl"
    for name in ("lb_generate", "lb_generate_stream", "lb_completions"):
        assert PD["requests"][name]["status"] == 200, name
    assert PD["requests"]["lb_generate"]["json"]["meta_info"]["completion_tokens"] == 16
    rooms = {role: re.findall(r"bootstrap_host='127.0.0.1', bootstrap_port=8998, bootstrap_room=(\d+)",
                              log(f"pd-h200-sglang-0.5.14-{role}"))
             for role in ("prefill", "decode")}
    # Each room twice per role (its Receive and its Finish line), the same three rooms in both.
    assert len(set(rooms["prefill"])) == 3 and sorted(rooms["prefill"]) == sorted(rooms["decode"])


def test_each_role_refuses_a_request_without_bootstrap_fields():
    for role in ("decode", "prefill"):
        answer = PD["direct"][f"{role}_without_bootstrap"]
        assert answer["status"] == 400
        assert answer["json"]["error"]["message"].startswith(
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid=")


def test_the_bootstrap_server():
    direct = PD["direct"]
    assert (direct["bootstrap_health"]["status"], direct["bootstrap_health"]["text"]) == (200, "OK")
    assert (direct["bootstrap_route_no_query"]["status"],
            direct["bootstrap_route_no_query"]["text"]) == (400, "Missing inputs for bootstrap server.")
    info = direct["bootstrap_route_info"]["json"]
    assert (info["attn_tp_size"], info["dp_size"], info["pp_size"], info["follow_bootstrap_room"]) == (1, 1, 1, True)
    assert set(direct["bootstrap_route_rank0"]["json"]) == {"rank_ip", "rank_port"}
    assert "CommonKVBootstrapServer started successfully on 127.0.0.1:8998" in log("pd-h200-sglang-0.5.14-prefill")


def test_both_roles_used_nixl_over_ucx():
    for role in ("prefill", "decode"):
        text = log(f"pd-h200-sglang-0.5.14-{role}")
        assert "NIXL KVManager initialized with backend: UCX" in text
        assert "End of disaggregation warmup" in text and "The server is fired up and ready to roll!" in text
