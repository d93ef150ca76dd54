"""
The stand-in as the ranks of one server over two hosts, as local processes on loopback: rank 0 waits
for rank 1 at its init address before it serves, rank 1 serves only the dummy /health, and a rank
that dies takes the other down, as NCCL does. What sglang 0.5.9 does is cited in
files/standin/standin_multinode.py.
"""

import re
import socket
import time

from test_standin import KIMI_PATH, free_port, get, launch, sglang_059, wait_for  # noqa: F401

GROUP = ["--tp-size", "2", "--nnodes", "2", "--host", "127.0.0.1"]


def ranks(launch, sglang_059, init_port, *ranks_started, **env):
    """The group's ranks, started in the order asked (0, 1 by default)."""
    flags = [*KIMI_PATH, *GROUP, "--dist-init-addr", f"127.0.0.1:{init_port}"]
    return {rank: launch(sglang_059, *flags, "--node-rank", str(rank), **env) for rank in ranks_started or (0, 1)}


def exited(proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return proc.poll()


def test_the_head_serves_only_once_every_rank_joined(launch, sglang_059):
    init = free_port()
    head = ranks(launch, sglang_059, init, 0)[0]
    time.sleep(2)  # more than its warm-up: it still waits at the rendezvous, nothing listens
    assert head.poll() is None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", head.port)) != 0
    other = ranks(launch, sglang_059, init, 1)[1]
    wait_for(head, timeout=30)
    wait_for(other, timeout=30)
    assert get(head.url + "/generate", body={"text": "Hi", "sampling_params": {"max_new_tokens": 4}})[0] == 200


def test_a_rank_above_0_serves_the_dummy_health_alone(launch, sglang_059):
    group = ranks(launch, sglang_059, free_port())
    wait_for(group[1], timeout=30)
    for path in ("/health", "/ping", "/health_generate"):
        assert get(group[1].url + path)[0] == 200
    assert get(group[1].url + "/generate", body={"text": "Hi"})[0] == 404
    assert get(group[1].url + "/v1/models")[0] == 404


def test_a_rank_that_dies_takes_the_head_down(launch, sglang_059):
    group = ranks(launch, sglang_059, free_port())
    wait_for(group[0], timeout=30)
    group[1].kill()
    assert exited(group[0]) is not None
    assert "NCCL error" in group[0].communicate()[1]


def test_the_head_that_dies_takes_the_ranks_down(launch, sglang_059):
    group = ranks(launch, sglang_059, free_port())
    wait_for(group[1], timeout=30)
    group[0].kill()
    assert exited(group[1]) is not None


def test_the_head_gives_up_after_the_dist_timeout(launch, sglang_059):
    head = launch(sglang_059, *KIMI_PATH, *GROUP, "--dist-init-addr", f"127.0.0.1:{free_port()}",
                  "--node-rank", "0", "--dist-timeout", "2")
    assert exited(head, timeout=20) == -9  # the launch phase's SIGQUIT handler kills the tree, itself too
    # torch's store names the time it waited (the --dist-timeout it was given), as sglang's log shows it
    assert re.search(r"Timed out after [23] seconds waiting for clients\. 1/2 clients joined", head.communicate()[1])


def test_a_whole_groups_head_keeps_its_store_but_lets_no_late_rank_in(launch, sglang_059):
    init = free_port()
    group = ranks(launch, sglang_059, init)
    wait_for(group[0], timeout=30)
    late = ranks(launch, sglang_059, init, 1)[1]  # a rank of another start: it waits for its own head
    with socket.create_connection(("127.0.0.1", init), timeout=5) as probe:
        assert probe.recv(16) == b""  # the port answers (the firewall's test reaches it), no group follows
    time.sleep(2)
    assert late.poll() is None and group[0].poll() is None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", late.port)) != 0  # not in the group: no /health
