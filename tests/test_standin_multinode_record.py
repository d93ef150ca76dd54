"""
The stand-in's ranks of one server over two node ranks held to real sglang 0.5.14's: the record of
``bench/gpu_multinode.py`` on one H100 (tests/data/gpu/multinode-h100-sglang-0.5.14.json, two ranks on
one GPU, NCCL over sockets on loopback). What rank 1 answers; the head alone at its ``--dist-timeout``
(the store's message, SIGKILL by its own hand, its port never opened); and rank 1 killed under a serving
head: the head's scheduler fails at once, then the crash diagnostics hold the process, silent, for
5 + 60 s (sglang's own waits, scaled here by ``SGLFLEET_STANDIN_TIME_SCALE``), then it SIGKILLs itself;
with the environment sglfleet's releases export on such a stack, after the first 5 s.
The logs' lines compared are the record's (``-rank1-killed.log``, ``-head-alone.log``).
"""

import json
import re
import signal
import socket
import time

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.plan.release import crash_environment
from test_server_flags import python_tree
from test_standin import KIMI_PATH, free_port, get, launch, wait_for  # noqa: F401  (fixtures)

DATA = PROJECT_ROOT / "tests" / "data" / "gpu"
RECORD = json.loads((DATA / "multinode-h100-sglang-0.5.14.json").read_text())
SCENARIOS = RECORD["scenarios"]
GROUP = ["--tp-size", "2", "--nnodes", "2", "--host", "127.0.0.1"]
SCALE = 0.1  # the launch fixture's SGLFLEET_STANDIN_TIME_SCALE
# What the head logs once rank 1 is gone, in order: the record's words, checked against its log below.
CRASH = ("Scheduler hit an exception", "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
         "Sleeping 5 seconds before crash diagnostics to let GPU activity settle.",
         "Waiting 60.0 seconds for CUDA coredumps before exiting.")
TIMED_OUT = re.compile(r"DistStoreError: Timed out after (\d+) seconds waiting for clients\. 1/2 clients joined\.")


@pytest.fixture(scope="module")
def sglang_0514():
    return python_tree("0.5.14")


def rank(launch, site, init: int, node_rank: int, *flags, **env):
    return launch(site, *KIMI_PATH, *GROUP, "--dist-init-addr", f"127.0.0.1:{init}", "--node-rank", str(node_rank),
                  *flags, **env)


def in_order(text: str, lines) -> bool:
    at = 0
    for line in lines:
        at = text.find(line, at)
        if at < 0:
            return False
    return True


def test_rank_1_answers_what_the_records_rank_1_answered(launch, sglang_0514):
    init = free_port()
    group = {node: rank(launch, sglang_0514, init, node) for node in (0, 1)}
    wait_for(group[1], timeout=30)
    for call, answered in SCENARIOS["a_head_first"]["rank1_answers"].items():
        method, path = call.split()
        status, body = get(group[1].url + path, body={"text": "Hi"} if method == "POST" else None)
        assert (status, json.loads(body) if body else "") == (answered["status"], answered["body"]), call


def test_the_head_alone_gives_up_at_its_dist_timeout_as_the_record(launch, sglang_0514):
    recorded = SCENARIOS["f_head_alone_dist_timeout"]
    log = (DATA / "multinode-h100-sglang-0.5.14-head-alone.log").read_text()
    waited = int(TIMED_OUT.search(log).group(1))  # 31 for --dist-timeout 30: the time the store waited
    head = rank(launch, sglang_0514, free_port(), 0, "--dist-timeout", "3")
    head.wait(timeout=30)
    assert head.returncode == recorded["rank"]["exit_status"] == -signal.SIGKILL  # kill_process_tree, itself too
    assert recorded["port_ever_listened"] is False
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", head.port)) != 0
    err = head.communicate()[1]
    assert int(TIMED_OUT.search(err).group(1)) - 3 == waited - 30
    said = "Received sigquit from a child process. It usually means the child failed."
    assert said in log and said in err


def test_rank_1_killed_leaves_the_head_silent_then_gone_as_the_record(launch, sglang_0514):
    recorded = SCENARIOS["b_rank1_killed_idle"]
    log = (DATA / "multinode-h100-sglang-0.5.14-rank1-killed.log").read_text()
    assert in_order(log, CRASH)
    survivor = next(r for r in recorded["ranks"].values() if r["node_rank"] == 0)
    took_s = survivor["exit_s"] - recorded["kill"]["survivor_since_start_s"]  # 65.6 s, 5 + 60 of them sglang's
    assert survivor["exit_status"] == -signal.SIGKILL
    # The record's head answered nothing after the kill: its probes timed out, then were reset, then refused.
    assert all("error" in probe for probe in recorded["probes"]["head_generate"])

    init = free_port()
    group = {node: rank(launch, sglang_0514, init, node) for node in (0, 1)}
    wait_for(group[0], timeout=30)
    killed = time.monotonic()
    group[1].kill()
    time.sleep(1)
    with pytest.raises(TimeoutError):  # the port takes the connection; nothing answers
        get(group[0].url + "/health", timeout=2)
    group[0].wait(timeout=30)
    gone_s = time.monotonic() - killed
    assert group[0].returncode == -signal.SIGKILL
    assert took_s * SCALE * 0.9 < gone_s < took_s * SCALE + 3, (gone_s, took_s)
    assert in_order(group[0].communicate()[1], CRASH)


def test_with_the_environment_sglfleet_renders_the_head_ends_after_the_py_spy_dump(launch, sglang_0514):
    environment = dict(crash_environment("0.5.14"))  # what a release on a 0.5.13-or-later stack exports
    init = free_port()
    group = {node: rank(launch, sglang_0514, init, node, **environment) for node in (0, 1)}
    wait_for(group[0], timeout=30)
    killed = time.monotonic()
    group[1].kill()
    group[0].wait(timeout=30)
    gone_s = time.monotonic() - killed
    assert group[0].returncode == -signal.SIGKILL
    assert gone_s < 5 * SCALE + 3, gone_s  # the 5 s before py-spy; the record's 60 more were the coredump wait
    err = group[0].communicate()[1]
    assert in_order(err, CRASH[:3]) and CRASH[3] not in err
