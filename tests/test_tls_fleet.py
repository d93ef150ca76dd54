"""
TLS on the local fleet (issue 41, part 5): the last host a gateway serving its client port with a
certificate from the fleet CA (``gateway_tls = "fleet_ca"``), the workers on sglang 0.5.23's flags
(``dev-sglang-0.5.23``, ``worker_tls = true``) serving TLS that the gateway verifies
(``--ca-cert-paths``). The official openai SDK streams through the TLS port trusting the fleet CA;
plain HTTP and an unverified client are refused; no key material shows in pyinfra's output, in
``ps``, in the journal; a second converge changes nothing. As ``deploy`` with sudo, as
inventory/dev.py logs in.
"""

import http.client
import json
import shlex
import ssl
import time
import urllib.error
import urllib.request

import httpx
import pytest

from deploying import SECRETS, eagle_change, fleet_key, host_state, pyinfra
from paths import GATEWAY, LAYOUT, UNIT
from sglfleet.artifacts.tls import FleetCA
from routing import Load
from sglfleet.devfleet.traffic import CLIENT_MIX
from test_gateway import clients_answered_in_full
from test_rollout import results

pytestmark = pytest.mark.fleet

GATEWAYS = {"SGLFLEET_DEV_GATEWAYS": "1"}
TLS = ("--data", "stack=dev-sglang-0.5.23", "--data", "worker_tls=true", "--data", "gateway_tls=fleet_ca")
KEY = SECRETS["SGLFLEET_API_KEY"]  # the client key "default"


def deploy(*args: str, timeout: float = 900):
    """``pyinfra inventory/dev.py deploy.py -y ARGS`` with the last host a gateway."""
    return pyinfra("deploy.py", "-y", *args, timeout=timeout, env=GATEWAYS)


@pytest.fixture(scope="module")
def tls(fleet):
    """The fleet converged with TLS on: ``(gateway, its https URL, workers, their https URLs, the CA's file)``."""
    if len(fleet.hosts) < 3:
        pytest.skip("needs a fleet of three hosts or more: two workers and a gateway")
    gateway, workers = fleet.hosts[-1], fleet.hosts[:-1]
    for host in fleet.hosts:
        fleet.fault(host, "clear")
    done = deploy(*TLS)
    assert done.returncode == 0, done.stdout[-3000:]
    ca = FleetCA.beside(fleet.secrets_file)
    assert ca.exists()
    yield (gateway, f"https://{fleet.address(gateway)}:30080", workers,
           [f"https://{fleet.address(host)}:30000" for host in workers], str(ca.cert_path), done.stdout)
    # Back to plain HTTP on the dev stack, then no gateway: the suite's other modules know neither.
    back = deploy()
    assert back.returncode == 0, back.stdout[-3000:]
    for host in fleet.hosts:
        fleet.inside(host, f"systemctl disable --now {GATEWAY.unit} 2>/dev/null; rm -f {GATEWAY.unit_file} "
                           f"{GATEWAY.env_file}; rm -rf {LAYOUT.tls_dir}; systemctl daemon-reload")


def status_from(fleet, host: str, url: str, cafile: str | None = None) -> int:
    """The status ``url`` answers a client on ``host`` (its python3, trusting ``cafile``); 0 where nothing answers."""
    script = ("import ssl, sys, urllib.request\n"
              "try:\n"
              f"    c = ssl.create_default_context(cafile={cafile!r}) if {cafile!r} else None\n"
              f"    print(urllib.request.urlopen({url!r}, timeout=5, context=c).status)\n"
              "except Exception:\n"
              "    print(0)\n")
    return int(fleet.inside(host, f"python3 -c {shlex.quote(script)}", check=False).stdout.strip() or 0)


def trusting(ca: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca)


def test_the_openai_sdk_streams_through_the_tls_port_with_the_fleet_ca(fleet, tls):
    from openai import OpenAI

    gateway, url, *_ , ca, _ = tls
    client = OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0,
                    http_client=httpx.Client(verify=trusting(ca), timeout=60))
    model = client.models.list().data[0].id
    for _ in range(4):  # round robin or not, more than one worker answers over its own TLS
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                                stream=True, max_tokens=8)
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split()
    completion = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4, stream=True)
    assert "".join(c.choices[0].text for c in completion if c.choices)


def test_plain_http_and_an_unverified_client_are_refused(fleet, tls):
    from openai import APIConnectionError, OpenAI

    gateway, url, workers, worker_urls, ca, _ = tls
    plain = url.replace("https://", "http://")
    # No answer in plain text on the TLS port: smg (rustls) sends a TLS alert where a status line should be.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        urllib.request.urlopen(f"{plain}/health", timeout=5)
    # The SDK's own trust (the system's CAs) does not know the fleet CA: refused before a byte is sent.
    with pytest.raises(APIConnectionError) as refused:
        OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0).models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__) or "certificate verify failed" in \
        str(refused.value.__cause__)
    # A worker answers no plain HTTP either, asked from its own gateway host (the policy lets only it in);
    # over https with the fleet CA it answers.
    for worker in worker_urls:
        assert status_from(fleet, gateway, worker.replace("https://", "http://") + "/health") == 0
        assert status_from(fleet, gateway, f"{worker}/health", cafile=GATEWAY.tls_ca) == 200


def test_the_gateway_verifies_its_workers_over_https(fleet, tls):
    gateway, url, workers, worker_urls, ca, _ = tls
    request = urllib.request.Request(f"{url}/workers", headers={"Authorization": f"Bearer {fleet_key(fleet)}"})
    deadline = time.monotonic() + 60
    while True:
        listed = {w["url"]: w for w in json.load(urllib.request.urlopen(request, timeout=5,
                                                                          context=trusting(ca)))["workers"]}
        if set(listed) == set(worker_urls) and all(w.get("is_healthy") for w in listed.values()):
            break
        assert time.monotonic() < deadline, listed
        time.sleep(1)
    unit = fleet.inside(gateway, f"systemctl cat {GATEWAY.unit}").stdout
    assert "--ca-cert-paths /run/credentials/sglang-gateway.service/ca.crt" in unit


def test_no_key_material_in_output_ps_journal_and_files_are_root_only(fleet, tls):
    gateway, url, workers, worker_urls, ca, output = tls
    keys = {host: fleet.inside(host, f"cat {GATEWAY.tls_key if host == gateway else LAYOUT.tls_key}").stdout
            for host in fleet.hosts}
    bodies = {host: [line for line in key.splitlines() if line and not line.startswith("-----")]
              for host, key in keys.items()}
    assert all(bodies.values()), keys
    shown = pyinfra("deploy.py", "--dry", "--diff", *TLS, env=GATEWAYS).stdout
    for host in fleet.hosts:
        path = GATEWAY.tls_key if host == gateway else LAYOUT.tls_key
        assert fleet.inside(host, f"stat -c '%a %U %G' {path} {LAYOUT.tls_dir}/*").stdout.split("\n")[0] == "600 root root"
        ps = fleet.inside(host, "ps -eo args").stdout
        journal = fleet.inside(host, f"journalctl -u {GATEWAY.unit if host == gateway else UNIT} --no-pager -o cat").stdout
        for text in (output, shown, ps, journal):
            assert "PRIVATE KEY" not in text
            assert not any(line in text for line in bodies[host])
        # The key reaches the service by its credentials folder, named in argv, never its content (smg
        # renames its process "smg::router": its unit file names the folder, test_the_gateway_verifies_...).
        if host != gateway:
            assert "/run/credentials/" in ps


def test_a_second_converge_changes_nothing(fleet, tls):
    again = deploy(*TLS)
    assert again.returncode == 0, again.stdout[-3000:]
    totals = results(again.stdout)
    assert totals["success"] == 0 and totals["error"] == 0, again.stdout[-3000:]


def test_engines_that_stop_with_a_silent_window_roll_out_under_traffic_with_no_request_lost(fleet, tls):
    """
    Issue 44, part 3: from 0.5.14 sglang's port accepts and answers nothing for seconds after SIGTERM before
    the process kills itself, and the stand-in does the same on this stack (0.5.23; test_standin_http_record
    holds it to the GPU record). The rollout drains each engine from the gateway before it stops it, so the
    openai SDK's streamed traffic through the TLS port loses nothing.
    """
    gateway, url, workers, worker_urls, ca, _ = tls
    before = {host: host_state(fleet, host)["current"] for host in workers}
    load = Load(url, mix=CLIENT_MIX, ca=ca)
    time.sleep(2)
    try:
        done = deploy(*TLS, *eagle_change(2))
    finally:
        time.sleep(2)
        load.stop()
    assert done.returncode == 0, done.stdout[-3000:]
    assert all(host_state(fleet, host)["current"] != before[host] for host in workers)  # each engine was stopped
    clients_answered_in_full(load)


def test_turning_tls_off_rolls_out_in_one_converge(fleet, tls):
    """The engines switch to plain HTTP first, the gateway last: until it restarts the controller still
    reaches it over https (with the fleet CA), then over http, and the clients are served in plain HTTP."""
    from openai import OpenAI

    gateway, url, workers, worker_urls, ca, _ = tls
    off = deploy()
    assert off.returncode == 0, off.stdout[-3000:]
    plain = url.replace("https://", "http://")
    client = OpenAI(base_url=f"{plain}/v1", api_key=KEY, max_retries=0)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                            stream=True, max_tokens=8)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).split()
    for worker in worker_urls:
        assert status_from(fleet, gateway, worker.replace("https://", "http://") + "/health") == 200

