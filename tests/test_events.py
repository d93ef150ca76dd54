"""
What a run did stays visible: the controller's event log, ``sglfleet events``, and
webhooks, first as pure pieces, then on the local fleet with a real webhook
receiver on the controller's loopback.
"""

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploying import SECRETS, converged, deploy, eagle_change, sglfleet
from sglfleet.events import REASONS, EventLog, parse_since, read_events
from sglfleet.plan.secrets import SecretsError, engine_env, load_secrets, secret_values
from sglfleet.hooks.webhooks import Webhook, WebhookError

TOKEN = "whk-tokenV8q2Lr6"  # the webhook's secret: never in a line, a log or an event


class Receiver:
    """A webhook receiver on 127.0.0.1: what it was POSTed, answered with ``status``."""

    def __init__(self, status: int = 204):
        received, self.status = [], status
        self.slow = {}  # reason -> seconds its POST waits before it is read: a slow first delivery
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(outer.slow.get(json.loads(body).get("reason"), 0))
                received.append((self.path, json.loads(body)))
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.received = received
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    found = Receiver()
    yield found
    found.close()


# -- the log, pure ------------------------------------------------------------------


def test_each_event_is_one_json_line_with_its_fields_and_no_secret(tmp_path):
    log = EventLog(tmp_path / "state" / "events.jsonl", inventory="inventory/dev.py", secrets=("s3cr3t-value",))
    log.emit("GatePassed", host="node1", service="sglang", from_release="aaa", to_release="bbb",
             figures={"tokens": 256}, message="gate passed; the key s3cr3t-value leaked into a message")
    log.emit("RunFinished", figures={"passed": 1, "failed": 0})
    lines = (tmp_path / "state" / "events.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert {k: first[k] for k in ("run", "inventory", "host", "service", "reason", "from", "to", "figures")} == {
        "run": log.run, "inventory": "inventory/dev.py", "host": "node1", "service": "sglang", "reason": "GatePassed",
        "from": "aaa", "to": "bbb", "figures": {"tokens": 256}}
    assert json.loads(lines[1])["service"] is None  # the run's, not a service's
    assert first["time"].endswith("Z") and "s3cr3t-value" not in lines[0] and "<redacted>" in first["message"]
    assert oct((tmp_path / "state" / "events.jsonl").stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "state").stat().st_mode & 0o777) == "0o700"
    with pytest.raises(ValueError, match="unknown event reason 'Exploded'"):
        log.emit("Exploded")


def test_reading_filters_by_time_host_and_run_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "events.jsonl"
    one, two = EventLog(path, "inv.py"), EventLog(path, "inv.py")
    one.emit("RunStarted")
    one.emit("HostSwitched", host="node1")
    two.emit("HostSwitched", host="node2")
    with path.open("a") as handle:
        handle.write('{"time": "2026-12-01T')  # a writer killed mid-line
    assert [e["reason"] for e in read_events(path, host="node1")] == ["RunStarted", "HostSwitched"]
    assert [e["host"] for e in read_events(path, run=two.run)] == ["node2"]
    assert len(read_events(path, since=parse_since("1h"))) == 3
    assert read_events(path, since=parse_since("2999-01-01T00:00:00Z")) == []
    assert read_events(tmp_path / "absent.jsonl") == []
    assert parse_since("30m", now=10_000.0) == 8_200.0
    with pytest.raises(ValueError, match="give a duration"):
        parse_since("yesterday")


def test_a_failing_listener_is_an_event_and_never_an_exception(tmp_path):
    def broken(event):
        raise WebhookError("http://hooks.invalid/x: URLError after 3 tries")

    log = EventLog(tmp_path / "events.jsonl", "inv.py", listeners=[broken])
    log.emit("RunFinished")
    assert [(e["reason"], e["message"]) for e in read_events(tmp_path / "events.jsonl")] == [
        ("RunFinished", ""), ("WebhookFailed", "RunFinished: http://hooks.invalid/x: URLError after 3 tries")]


# -- webhooks, against a real receiver -------------------------------------------------


def test_a_webhook_gets_the_reasons_it_subscribes_to_with_its_secret_in_the_url(receiver, monkeypatch):
    monkeypatch.setenv("SGLFLEET_WEBHOOK_TOKEN", TOKEN)
    hook = Webhook.from_config({"url": receiver.url + "/hook/{token}", "reasons": ["RolloutAborted"]}, ())
    hook.send({"reason": "RunStarted"})
    hook.send({"reason": "RolloutAborted", "host": None, "message": "node1: gate failed"})
    assert receiver.received == [(f"/hook/{TOKEN}", {"reason": "RolloutAborted", "host": None,
                                                      "message": "node1: gate failed"})]


def test_a_webhook_that_keeps_failing_is_tried_three_times_then_named_without_its_secret(receiver, monkeypatch):
    monkeypatch.setenv("SGLFLEET_WEBHOOK_TOKEN", TOKEN)
    receiver.status = 503
    waits = []
    hook = Webhook.from_config({"url": receiver.url + "/{token}", "reasons": ["RunFinished"]}, ())
    with pytest.raises(WebhookError) as error:
        hook.send({"reason": "RunFinished"}, sleep=waits.append)
    assert len(receiver.received) == 3 and waits == [1.0, 2.0]
    assert str(error.value) == f"{receiver.url}/{{token}}: answered 503 after 3 tries"
    receiver.status = 404  # a wrong URL: no retry
    with pytest.raises(WebhookError, match="answered 404 after 1 tries"):
        hook.send({"reason": "RunFinished"}, sleep=waits.append)
    monkeypatch.delenv("SGLFLEET_WEBHOOK_TOKEN")
    with pytest.raises(WebhookError, match="needs SGLFLEET_WEBHOOK_TOKEN"):
        Webhook.from_config({"url": receiver.url + "/{token}", "reasons": ["RunFinished"]}, ()).send(
            {"reason": "RunFinished"})


def test_a_run_posts_to_each_webhook_in_the_order_its_events_happened(receiver, tmp_path):
    # As inside pyinfra: gevent's sockets, so deliveries overlap; the first is slow to be read.
    receiver.slow = {"GateFailed": 1.0, "RunFinished": 3.0}
    script = f"""
import gevent.monkey; gevent.monkey.patch_all()
from sglfleet.events import EventLog
from sglfleet.hooks import event_log
from sglfleet.record.run import RunRecord
from sglfleet.hooks.webhooks import Webhook
from pathlib import Path
run = RunRecord(log=EventLog(Path({str(tmp_path / "events.jsonl")!r}), "inv.py"))
hook = Webhook({receiver.url + '/hook'!r}, ("GateFailed", "RolloutAborted", "RunFinished"))
outbox = event_log._Outbox(hook, run)
outbox.listener({{"reason": "GateFailed", "host": "node1"}})
outbox.listener({{"reason": "RunStarted", "host": None}})
outbox.listener({{"reason": "RolloutAborted", "host": None}})
outbox.close(10.0)
late = event_log._Outbox(hook, run)  # the end of a run waits a bounded time, and says what it left
late.listener({{"reason": "RunFinished", "host": None}})
late.listener({{"reason": "RolloutAborted", "host": None}})
late.close(0.5)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [body["reason"] for _, body in receiver.received][:2] == ["GateFailed", "RolloutAborted"]
    assert [(e["reason"], e["message"]) for e in read_events(tmp_path / "events.jsonl")] == [
        ("WebhookFailed", f"{receiver.url}/hook: the run ended before it took 2 events (the last: RolloutAborted)")]


def test_the_webhook_token_may_sit_in_the_secrets_file_and_never_reaches_the_hosts(tmp_path):
    path = tmp_path / "secrets.env"
    path.write_text(f"SGLFLEET_API_KEY=k3y\nSGLFLEET_WEBHOOK_TOKEN={TOKEN}\n")
    path.chmod(0o600)
    # what sglang.env gets, where clients reach the engine directly
    assert engine_env(load_secrets(str(path), {}), behind_gateways=False) == {"SGLANG_API_KEY": "k3y"}
    hook = Webhook.from_config({"url": "http://127.0.0.1:9/{token}", "reasons": ["RunFinished"]}, (str(path),))
    assert hook.secret == TOKEN
    path.chmod(0o644)  # checked as the other secrets are: a file others can read is refused
    with pytest.raises(SecretsError, match="chmod 600"):
        Webhook.from_config({"url": "http://127.0.0.1:9/{token}", "reasons": ["RunFinished"]}, (str(path),))


def test_hosts_with_their_own_secrets_files_have_every_value_kept_out_of_the_log(tmp_path, monkeypatch):
    for name in ("SGLFLEET_API_KEY", "SGLFLEET_HF_TOKEN", "SGLFLEET_WEBHOOK_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    canary, rest, loose = tmp_path / "canary.env", tmp_path / "rest.env", tmp_path / "loose.env"
    canary.write_text("SGLFLEET_API_KEY=canary-k3y\n")
    rest.write_text(f"SGLFLEET_API_KEY=rest-k3y\nSGLFLEET_HF_TOKEN=hf_rest\nSGLFLEET_WEBHOOK_TOKEN={TOKEN}\n")
    loose.write_text("SGLFLEET_API_KEY=loose-k3y\n")
    for path in (canary, rest, loose):
        path.chmod(0o600)
    loose.chmod(0o644)  # refused: the service step of its hosts says so; it adds nothing here
    files = (str(canary), str(rest), str(canary), str(loose))  # in inventory order, one per host
    assert set(secret_values(files)) == {"canary-k3y", "rest-k3y", "hf_rest"}
    # the token sits in the second host's file only: found there, not missed for the first's
    hook = Webhook.from_config({"url": "http://127.0.0.1:9/{token}", "reasons": ["RunFinished"]}, files[:3])
    assert hook.secret == TOKEN
    log = EventLog(tmp_path / "events.jsonl", inventory="inv.py", secrets=secret_values(files) + (hook.secret,))
    log.emit("RunStarted", message=f"keys canary-k3y rest-k3y hf_rest {TOKEN}")
    (event,) = read_events(tmp_path / "events.jsonl")
    assert not {"canary-k3y", "rest-k3y", "hf_rest", TOKEN} & set(event["message"].split()), event["message"]


# -- on the local fleet -------------------------------------------------------------------

CHANGE = eagle_change(2)
FAILING = (*eagle_change(1), "--data", "gate_warmup_s=30")  # with the canary made to crash


@pytest.fixture(scope="module")
def fleet_up(fleet):
    yield from converged(fleet)


def observed(receiver, events_file) -> tuple[str, ...]:
    hooks = json.dumps([{"url": receiver.url + "/hook/{token}",
                         "reasons": ["RolloutCompleted", "RolloutAborted", "GateFailed"]}])
    return ("--data", f"events_file={events_file}", "--data", f"notify_webhooks={hooks}")


@pytest.mark.fleet
def test_a_rollout_leaves_its_events_in_order_and_tells_the_webhook(fleet_up, receiver, tmp_path, monkeypatch):
    events_file = tmp_path / "events.jsonl"
    monkeypatch.setenv("SGLFLEET_WEBHOOK_TOKEN", TOKEN)
    done = deploy(*CHANGE, *observed(receiver, events_file))
    assert done.returncode == 0, done.stdout[-3000:]

    shown = sglfleet("events", "--file", str(events_file), "--json")
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len({e["run"] for e in events}) == 1 and all(e["reason"] in REASONS for e in events)
    assert [(e["reason"], e["host"]) for e in events] == [
        ("RunStarted", None),
        ("BatchStarted", None), ("HostSwitched", "node1"), ("GatePassed", "node1"), ("CompileCachesPacked", "node1"),
        ("BatchCompleted", None), ("BatchStarted", None), ("CompileCachesTaken", "node2"), ("HostSwitched", "node2"),
        ("GatePassed", "node2"),
        ("BatchCompleted", None), ("BatchStarted", None), ("CompileCachesTaken", "node3"), ("HostSwitched", "node3"),
        ("GatePassed", "node3"),
        ("BatchCompleted", None), ("RolloutCompleted", None), ("RunFinished", None)]
    gate = events[3]
    assert gate["from"] and gate["to"] and gate["from"] != gate["to"]
    assert gate["figures"]["tokens"] == 256 and gate["figures"]["spec_accept_length"] > 1
    assert [e["message"] for e in events if e["reason"] == "BatchCompleted"] == [
        "canary: 1 of 1 passed", "wave1: 1 of 1 passed", "wave2: 1 of 1 passed"]
    assert [(path, body["reason"]) for path, body in receiver.received] == [(f"/hook/{TOKEN}", "RolloutCompleted")]
    text = events_file.read_text() + shown.stdout + done.stdout
    assert TOKEN not in events_file.read_text() + done.stdout
    assert not any(value in text for value in SECRETS.values())

    node2 = sglfleet("events", "--file", str(events_file), "--host", "node2", "--json")
    hosts = [json.loads(line)["host"] for line in node2.stdout.splitlines()]
    assert hosts.count("node2") == 3 and hosts.count(None) == 9 and len(hosts) == 12  # its own and the run's
    table = sglfleet("events", "--file", str(events_file), "--since", "1h").stdout.splitlines()
    assert len(table) == len(events) and "GatePassed" in table[3] and " node1 " in table[3]

    # The same converge again: a run that switched nothing says so, and only that.
    again = deploy(*CHANGE, *observed(receiver, events_file))
    assert again.returncode == 0, again.stdout[-3000:]
    second = read_events(events_file, run=read_events(events_file)[-1]["run"])
    assert [e["reason"] for e in second] == ["RunStarted", "RunFinished"]
    assert second[-1]["message"] == "nothing to switch"


@pytest.mark.fleet
def test_a_crashing_canary_is_an_aborted_rollout_with_the_failed_host(fleet_up, receiver, tmp_path, monkeypatch):
    fleet = fleet_up
    events_file = tmp_path / "events.jsonl"
    monkeypatch.setenv("SGLFLEET_WEBHOOK_TOKEN", TOKEN)
    fleet.fault("node1", "crash")
    try:
        done = deploy(*FAILING, *observed(receiver, events_file))
    finally:
        fleet.fault("node1", "clear")
    assert done.returncode != 0
    events = read_events(events_file)
    reasons = [(e["reason"], e["host"]) for e in events]
    assert reasons[:5] == [("RunStarted", None), ("BatchStarted", None), ("HostSwitched", "node1"),
                           ("GateFailed", "node1"), ("HostRolledBack", "node1")]
    assert ("FailureBudgetExceeded", None) in reasons
    assert reasons[-2:] == [("RolloutAborted", None), ("RunFinished", None)]
    assert not any(e["host"] in ("node2", "node3") and e["reason"] == "HostSwitched" for e in events)
    aborted = events[-2]
    assert aborted["message"].startswith("node1: gate failed on release ") and aborted["figures"]["failed"] >= 1
    assert [body["reason"] for _, body in receiver.received] == ["GateFailed", "RolloutAborted"]
    assert "node1" in receiver.received[-1][1]["message"]
    assert not any(value in events_file.read_text() for value in (*SECRETS.values(), TOKEN))
