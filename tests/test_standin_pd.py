"""
The stand-in's prefill and decode roles as local processes, behind the real smg 1.13.0 in PD mode
(the gateway stack's wheels, unpacked): a generation goes prefill -> decode, a request without
bootstrap fields gets sglang's 400, each role shows its own metrics, and a pair of two releases is
refused and counted. What sglang 0.5.9 does is cited in files/standin/standin_disagg.py.
"""

import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from sglfleet.artifacts import wheelhouse
from sglfleet.artifacts.stacks import load_stack
from sglfleet.controller import router
from test_standin import KIMI_PATH, free_port, get, launch, scrape, sglang_059, value, wait_for  # noqa: F401

ROLE = ["--disaggregation-transfer-backend", "mooncake", "--enable-metrics", "--host", "127.0.0.1"]


@pytest.fixture(scope="module")
def smg_site(tmp_path_factory):
    """smg 1.13.0 and its dependencies from the gateway stack's wheelhouse, unpacked."""
    site = tmp_path_factory.mktemp("smg")
    for local in wheelhouse.ensure(load_stack("gateway-smg-1.13.0")).values():
        if local.path.name.endswith(".whl") and not local.path.name.startswith("uv-"):
            zipfile.ZipFile(local.path).extractall(site)
    return site


@pytest.fixture
def gateway(smg_site):
    """Start smg in PD mode: ``start(prefills [(url, bootstrap port)], decodes [url])`` -> its URL."""
    procs = []

    def start(prefills, decodes):
        port = free_port()
        argv = [sys.executable, "-m", "smg.launch_router", "--host", "127.0.0.1", "--port", str(port),
                "--policy", "round_robin", "--log-level", "warn", "--pd-disaggregation",
                # its metrics on a port of its own (29000 by default): another smg or router may hold it
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        for url, bootstrap in prefills:
            argv += ["--prefill", url, str(bootstrap)]
        for url in decodes:
            argv += ["--decode", url]
        proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(smg_site)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            try:
                listed = router.workers(url)
                if len(listed) == len(prefills) + len(decodes) and all(w.get("is_healthy") for w in listed.values()):
                    return url
            except router.RouterError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"smg never listed its workers healthy: {router.workers(url)}")

    yield start
    for proc in procs:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def pair(launch, sglang_059, decode_flags=()):
    """A prefill and a decode stand-in, up; ``(prefill, its bootstrap port, decode)``."""
    bootstrap = free_port()
    prefill = launch(sglang_059, *KIMI_PATH, *ROLE, "--disaggregation-mode", "prefill",
                     "--disaggregation-bootstrap-port", str(bootstrap))
    decode = launch(sglang_059, *KIMI_PATH, *ROLE, "--disaggregation-mode", "decode", *decode_flags)
    for proc in (prefill, decode):
        wait_for(proc, timeout=30)
    return prefill, bootstrap, decode


def post(url, body):
    """(status, text) of a JSON POST, as clients send it (smg asks for the Content-Type)."""
    return get(url, headers={"Content-Type": "application/json"}, body=body)


def chat_body(text="Hello there", tokens=8):
    return {"text": text, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}


def test_a_generation_goes_prefill_then_decode_through_smg(launch, sglang_059, gateway):
    prefill, bootstrap, decode = pair(launch, sglang_059)
    url = gateway([(prefill.url, bootstrap)], [decode.url])
    listed = router.workers(url)
    assert {w["url"]: w.get("worker_type") for w in listed.values()} == {prefill.url: "prefill", decode.url: "decode"}
    code, text = post(url + "/generate", chat_body(tokens=12))
    assert code == 200, text
    answer = json.loads(text)
    assert answer["meta_info"]["completion_tokens"] == 12  # the decode's answer: the prefill computes one
    # Each role counted its side of the one hand-over, on its own /metrics.
    assert value(scrape(prefill), "sglfleet_standin_pd_kv_sent_total") == 1
    assert value(scrape(prefill), "sglfleet_standin_pd_role", role="prefill") == 1
    decoded = scrape(decode)
    assert value(decoded, "sglfleet_standin_pd_kv_received_total") == 1
    assert value(decoded, "sglfleet_standin_pd_mismatched_pairs_total") == 0
    assert value(decoded, "sglfleet_standin_pd_role", role="decode") == 1
    assert value(scrape(decode), "sglfleet_standin_pd_kv_sent_total") is None  # a decode sends nothing


def test_the_prefills_bootstrap_server_answers_as_sglangs(launch, sglang_059):
    prefill, bootstrap, decode = pair(launch, sglang_059)
    base = f"http://127.0.0.1:{bootstrap}"
    assert get(base + "/health") == (200, "OK")
    assert get(base + "/route") == (400, "Missing inputs for bootstrap server.")
    code, text = get(base + "/route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1")
    assert code == 200 and json.loads(text)["prefill_page_size"] == 1
    code, text = get(base + "/route?engine_rank=0&target_dp_group=0&target_pp_rank=0")
    assert code == 200 and set(json.loads(text)) == {"rank_ip", "rank_port"}


def test_a_request_without_bootstrap_fields_gets_sglangs_400(launch, sglang_059):
    prefill, _, decode = pair(launch, sglang_059)
    for proc in (prefill, decode):
        code, text = post(proc.url + "/generate", {**chat_body(), "rid": "r1"})
        assert code == 400
        assert json.loads(text) == {"error": {"message": "Invalid request: Disaggregated request received without "
                                                         "bootstrap room id. req.rid='r1'"}}
    # sglang's own solo path, as its warm-up and sglfleet's gate use it, serves each alone.
    code, text = post(decode.url + "/generate", {**chat_body(), "bootstrap_host": "2.2.2.2", "bootstrap_room": 7})
    assert code == 200, text


def test_a_pair_of_two_releases_is_refused_and_counted(launch, sglang_059, gateway):
    # The decode runs another release: one more launch flag the prefill does not have.
    prefill, bootstrap, decode = pair(launch, sglang_059, decode_flags=("--max-running-requests", "32"))
    url = gateway([(prefill.url, bootstrap)], [decode.url])
    code, text = post(url + "/generate", chat_body())
    assert code >= 500, text
    decoded = scrape(decode)
    assert value(decoded, "sglfleet_standin_pd_mismatched_pairs_total") >= 1
    assert value(decoded, "sglfleet_standin_pd_kv_received_total") == 0


def test_a_worker_rejoins_smg_with_its_role(launch, sglang_059, gateway):
    """router.join with the worker's role: smg lists it as a prefill with its bootstrap port, and routes to it."""
    prefill, bootstrap, decode = pair(launch, sglang_059)
    url = gateway([(prefill.url, bootstrap)], [decode.url])
    router.drain(url, decode.url, timeout=30)
    assert decode.url not in router.workers(url)
    router.join(url, decode.url, timeout=30, spec={"worker_type": "decode"})
    assert router.workers(url)[decode.url].get("worker_type") == "decode"
    code, text = post(url + "/generate", chat_body())
    assert code == 200, text


def test_the_flip_stops_smg_picking_the_old_release_at_once(launch, sglang_059, gateway):
    """router.stop_routing: every worker named is no longer picked once it returns (smg answers 503 with no
    pair), without waiting for their requests; the new ones then join with their roles."""
    prefill, bootstrap, decode = pair(launch, sglang_059)
    url = gateway([(prefill.url, bootstrap)], [decode.url])
    router.stop_routing(url, [prefill.url, decode.url], timeout=30)
    assert all(w.get("status") == "draining" for w in router.workers(url).values())
    code, text = post(url + "/generate", chat_body())
    assert code == 503, text
    router.join(url, prefill.url, timeout=30, spec={"worker_type": "prefill", "bootstrap_port": bootstrap})
    router.join(url, decode.url, timeout=30, spec={"worker_type": "decode"})
    assert {w.get("worker_type") for w in router.workers(url).values()} == {"prefill", "decode"}
    code, text = post(url + "/generate", chat_body())
    assert code == 200, text


def test_openai_clients_go_prefill_then_decode_too(launch, sglang_059, gateway):
    """A chat completion and a completion through smg in PD mode: each hands its KV over like /generate,
    and one without bootstrap fields gets the 400 in OpenAI's shape."""
    prefill, bootstrap, decode = pair(launch, sglang_059)
    url = gateway([(prefill.url, bootstrap)], [decode.url])
    code, text = post(url + "/v1/chat/completions", {"model": "/models/kimi", "max_tokens": 6,
                                                     "messages": [{"role": "user", "content": "Hi"}]})
    assert code == 200, text
    assert json.loads(text)["usage"]["completion_tokens"] == 6
    code, text = post(url + "/v1/completions", {"model": "/models/kimi", "prompt": "Hi", "max_tokens": 5})
    assert code == 200, text
    assert value(scrape(prefill), "sglfleet_standin_pd_kv_sent_total") == 2
    assert value(scrape(decode), "sglfleet_standin_pd_kv_received_total") == 2
    code, text = post(decode.url + "/v1/chat/completions", {"model": "/models/kimi",
                                                            "messages": [{"role": "user", "content": "Hi"}]})
    assert code == 400 and "without bootstrap room id" in json.loads(text)["message"], text
