"""The stand-in's prefill and decode roles held to what sglang 0.5.14 did on an H200
(``tests/data/gpu/pd-h200-sglang-0.5.14.json`` and its logs, from ``bench/gpu_pd.py``), where they overlap.

Pure: the stand-in's ``Disaggregation`` runs in this process (the prefill's bootstrap server on a
free loopback port); no server, no fleet. The stand-in follows sglang 0.5.9; what 0.5.14 does
otherwise, and what the stand-in does not model, is named in ``DIFFERENCES`` with its source.
"""

import json
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from sglfleet import FILES, PROJECT_ROOT

sys.path.insert(0, str(FILES / "standin"))
import standin_disagg  # noqa: E402

GPU = PROJECT_ROOT / "tests" / "data" / "gpu"
PD = json.loads((GPU / "pd-h200-sglang-0.5.14.json").read_text())
LOGS = {role: (GPU / f"pd-h200-sglang-0.5.14-{role}.log").read_text() for role in ("prefill", "decode")}
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")

# Where the stand-in (0.5.9's behaviour) and the GPU's 0.5.14 differ, with the source of each.
DIFFERENCES = {
    "route_query": "0.5.14's GET /route takes prefill_dp_rank, prefill_cp_rank, target_tp_rank, target_pp_rank "
                   "(srt/disaggregation/common/conn.py:1334-1345); 0.5.9's, which the stand-in follows, "
                   "engine_rank, target_dp_group, target_pp_rank (standin_disagg.py's docstring, conn.py:503-646). "
                   "So 0.5.14's query gets the stand-in's 400, and 0.5.9's the GPU's.",
    "route_info": "0.5.14 answers the -1 query with its PrefillServerInfo (attn_tp_size, attn_cp_size, dp_size, "
                  "pp_size, page_size, kv_cache_dtype, follow_bootstrap_room, ...); the stand-in 0.5.9's "
                  "prefill_attn_tp_size, prefill_dp_size, prefill_pp_size, prefill_page_size.",
    "log_lines": "0.5.14 logs 'CommonKVBootstrapServer started successfully on HOST:PORT' (common/conn.py:1455) "
                 "and 'NIXL KVManager initialized with backend: UCX' (nixl/conn.py:289); the stand-in "
                 "'Bootstrap server listening on http://HOST:PORT (/route, /health)' and 'PD <mode>: transfer "
                 "backend <name> (stand-in: KV over HTTP), release fingerprint <fp>'.",
    "transfer": "The GPU's KV went prefill to decode through nixl over UCX, its pages written into the decode's "
                "pool; the stand-in's decode fetches the prefill's release fingerprint over HTTP "
                "(/sglfleet/kv, its own route). Nothing of the transfer itself is compared.",
    "warmup_room": "0.5.14's PD warm-up sends bootstrap_room [i * (2**63 // dp_size) + (i % tp_size)], 0 for "
                   "dp 1 tp 1 (http_server.py:2080-2092), as a list; the stand-in's warmup_fields gives 0 alone.",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def prefill():
    port = free_port()
    disagg = standin_disagg.Disaggregation("prefill", {"disaggregation_bootstrap_port": port}, "fp-one")
    disagg.serve_bootstrap("127.0.0.1", port)
    yield disagg, port
    disagg.server.shutdown()
    disagg.server.server_close()


def without_rid(message: str) -> str:
    return re.sub(r"req\.rid='[0-9a-f]+'", "req.rid='<rid>'", message)


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_a_request_without_bootstrap_fields_gets_the_gpus_400(mode):
    gpu = PD["direct"][f"{mode}_without_bootstrap"]
    disagg = standin_disagg.Disaggregation(mode, {}, "fp-one")
    status, payload = disagg.admit({"text": PD["prompt"], "rid": "d5559a8577b14fcdbc451ab1ed407c8c",
                                    "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
    assert status == gpu["status"] == 400
    assert set(payload) == set(gpu["json"]) == {"error"} and set(payload["error"]) == set(gpu["json"]["error"])
    assert without_rid(payload["error"]["message"]) == without_rid(gpu["json"]["error"]["message"])
    # Each role logged the same message with its timestamp (scheduler.py:2066-2070 in 0.5.14).
    assert re.search(r"\] Invalid request: Disaggregated request received without bootstrap room id\. "
                     r"req\.rid='[0-9a-f]+'$", LOGS[mode], re.M)


def test_the_bootstrap_servers_health_and_missing_query_as_the_gpu(prefill):
    _disagg, port = prefill
    direct = PD["direct"]
    assert get(f"http://127.0.0.1:{port}/health") == (direct["bootstrap_health"]["status"],
                                                      direct["bootstrap_health"]["text"]) == (200, "OK")
    assert get(f"http://127.0.0.1:{port}/route") == (direct["bootstrap_route_no_query"]["status"],
                                                     direct["bootstrap_route_no_query"]["text"])


def test_the_route_query_differs_as_named(prefill):
    _disagg, port = prefill
    query_0514 = PD["direct"]["bootstrap_route_info"]["url"].partition("?")[2]
    assert get(f"http://127.0.0.1:{port}/route?{query_0514}") == (400, "Missing inputs for bootstrap server.")
    status, body = get(f"http://127.0.0.1:{port}/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1")
    gpu = PD["direct"]["bootstrap_route_info"]
    assert status == gpu["status"] == 200
    assert set(json.loads(body)) == {"prefill_attn_tp_size", "prefill_dp_size", "prefill_pp_size", "prefill_page_size"}
    assert {"attn_tp_size", "dp_size", "pp_size", "page_size"} <= set(gpu["json"])
    rank = json.loads(get(f"http://127.0.0.1:{port}/route?engine_rank=0&target_dp_group=0&target_pp_rank=0")[1])
    assert set(rank) == set(PD["direct"]["bootstrap_route_rank0"]["json"]) == {"rank_ip", "rank_port"}
    assert {"route_query", "route_info"} <= set(DIFFERENCES)


def test_the_warmup_takes_sglangs_solo_path():
    disagg = standin_disagg.Disaggregation("decode", {}, "fp-one")
    assert disagg.warmup_fields() == {"bootstrap_host": "2.2.2.2", "bootstrap_room": 0}
    for role in ("prefill", "decode"):
        text = LOGS[role]
        assert "Start of pd disaggregation warmup ..." in text and "End of disaggregation warmup" in text
        assert "bootstrap_host=['2.2.2.2'], bootstrap_port=[None], bootstrap_room=[0]" in text
    assert "warmup_room" in DIFFERENCES


def test_the_decode_continues_from_the_prefills_token_in_both(prefill):
    """The GPU: the prefill computed one token and the decode's answer begins with it; the stand-in's decode waits for the room's prefill."""
    answer = PD["requests"]["lb_generate"]["json"]
    finish = [ln for ln in LOGS["prefill"].splitlines() if "Finish: " in ln and "bootstrap_host='127.0.0.1'" in ln][0]
    first = re.search(r"out=\{'text': '([^']*)', 'output_ids': \[(\d+)\].*?'completion_tokens': (\d+)", finish)
    assert first.group(3) == "1"  # prefill.py:305-307 in 0.5.14: max_new_tokens = 1
    assert answer["output_ids"][0] == int(first.group(2)) and answer["text"].startswith(first.group(1))
    assert answer["meta_info"]["completion_tokens"] == 16
    # The decode's first batch holds the 5 prompt tokens, the prefill's token and its own: 7.
    assert re.search(r"Decode batch, #running-req: 1, #token: 7,", LOGS["decode"])

    disagg, port = prefill
    decode = standin_disagg.Disaggregation("decode", {}, "fp-one")
    room = 1951025454463932334  # the GPU's first room through the balancer
    body = {"text": PD["prompt"], "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room,
            "sampling_params": {"max_new_tokens": 16}}
    done = {}

    def run_decode():
        done["result"], done["at"] = decode.admit(dict(body)), time.monotonic()

    thread = threading.Thread(target=run_decode)
    thread.start()
    time.sleep(0.3)
    assert "result" not in done  # the decode waits: the room has not reached the prefill
    prefill_body = json.loads(json.dumps(body))
    sent_at = time.monotonic()
    assert disagg.admit(prefill_body) is None
    assert prefill_body["sampling_params"]["max_new_tokens"] == 1  # the prefill computes one token, as on the GPU
    thread.join(10)
    assert done["result"] is None and done["at"] >= sent_at


def test_the_balancer_sent_both_roles_the_same_bootstrap_fields():
    # What smg (pd_router.rs) and mini_lb both add, and what the stand-in reads (admit): host, port, room.
    rooms = {role: set(re.findall(r"bootstrap_host='127\.0\.0\.1', bootstrap_port=8998, bootstrap_room=(\d+)",
                                  LOGS[role])) for role in LOGS}
    assert len(rooms["prefill"]) == 3 and rooms["prefill"] == rooms["decode"]
    assert "1951025454463932334" in rooms["prefill"]


def test_the_log_lines_differ_as_named():
    assert re.search(r"CommonKVBootstrapServer started successfully on 127\.0\.0\.1:8998$", LOGS["prefill"], re.M)
    for role in LOGS:
        assert re.search(r"\] NIXL KVManager initialized with backend: UCX$", LOGS[role], re.M)
    source = (FILES / "standin" / "standin_disagg.py").read_text()
    assert "Bootstrap server listening on http://{host}:{port} (/route, /health)" in source
    assert "(stand-in: KV over HTTP)" in source
    assert {"log_lines", "transfer"} <= set(DIFFERENCES)
