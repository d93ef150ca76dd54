#!/usr/bin/python3
"""Switch, gate and roll back SGLang releases on this host.

Installed on every host as ``/opt/sglfleet/bin/sglfleet-release`` and run by
the controller over SSH. The gate runs here, on the host, so it works when the
serving port is closed to the controller, and a lost SSH session cannot leave
a half-switched host: the switch and any rollback happen under one lock.

    sglfleet-release activate RELEASE_ID   switch current to RELEASE_ID, restart, gate;
                                           on a failed gate switch back and restart
    sglfleet-release rollback              switch current to previous, restart, gate
    sglfleet-release gate                  run the gate against the current release
    sglfleet-release state                 print this host's release state as JSON

Exit status: 0 passed; 1 the gate failed and the host serves its earlier
release again; 2 usage or layout error; 3 the host is busy (another run held
the lock past --wait-lock); 4 the gate failed and nothing serves (no earlier release, or it
failed too).

Python 3.9+ standard library only: it runs with the host's own python3.
"""

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.environ.get("SGLFLEET_ROOT", "/opt/sglfleet")
RELEASES = os.path.join(ROOT, "releases")
CURRENT = os.path.join(ROOT, "current")
PREVIOUS = os.path.join(ROOT, "previous")
LOCK = os.path.join(ROOT, ".lock")
ENV_FILE = "/etc/sglfleet/sglang.env"
UNIT = "sglang.service"
LOG_LINES = 15
SETTINGS = argparse.Namespace(warmup_s=1800.0, prompt="The capital of France is",
                              min_spec_accept_length=None)  # replaced by main()


class GateFailed(Exception):
    """A gate check failed: ``check`` names it, the message says what was seen."""

    def __init__(self, check, detail):
        super().__init__(f"{check}: {detail}")
        self.check = check


def release_id_of(link):
    try:
        return os.path.basename(os.readlink(link))
    except OSError:
        return None


def point(link, release_id):
    """Point ``link`` at ``releases/release_id`` with rename(2): never rm + ln."""
    if release_id is None:
        if os.path.lexists(link):
            os.unlink(link)
        return
    temporary = f"{link}.new"
    if os.path.lexists(temporary):
        os.unlink(temporary)
    os.symlink(os.path.join("releases", release_id), temporary)
    os.rename(temporary, link)


def read_release(release_id):
    with open(os.path.join(RELEASES, release_id, "release.json")) as handle:
        return json.load(handle)


def systemctl(*args, check=True):
    return subprocess.run(["systemctl", *args], check=check, capture_output=True, text=True)


def unit_properties():
    out = systemctl(
        "show", UNIT, "-p", "ActiveState,SubState,NRestarts,MainPID,ActiveEnterTimestamp",
        check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal_tail():
    out = subprocess.run(
        ["journalctl", "-u", UNIT, "-n", str(LOG_LINES), "--no-pager", "-o", "cat"],
        capture_output=True, text=True,
    ).stdout
    # sglang logs every server argument on one line: keep each line readable.
    lines = [line if len(line) <= 300 else line[:300] + " ..." for line in out.splitlines()]
    return "\n".join(lines) or "(the journal holds no lines for the unit)"


def api_key():
    """The API key from the env file, so a request passes ``--api-key``; never printed."""
    try:
        with open(ENV_FILE) as handle:
            for line in handle:
                name, _, value = line.strip().partition("=")
                if name == "SGLANG_API_KEY" and value:
                    return value.strip('"')
    except OSError:
        pass
    return None


def http(url, body=None, timeout=5.0):
    """Return (status, text); status 0 when nothing answered."""
    headers = {"Content-Type": "application/json"}
    key = api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (OSError, ValueError) as error:
        return 0, str(error)


def local_address(release):
    """Where this host reaches its own server: a wildcard listen address means loopback."""
    host = release["launch"].get("host") or "127.0.0.1"
    return "127.0.0.1" if host in ("0.0.0.0", "::") else host


def gate(release, started_restarts):
    """
    Pass only when the unit is active, /health is 200 within the warm-up budget,
    a real generation succeeds and the metric thresholds hold.
    """
    base = f"http://{local_address(release)}:{release['launch']['port']}"
    deadline = time.monotonic() + SETTINGS.warmup_s
    last = "no answer yet"

    while True:
        unit = unit_properties()
        # Fail fast on a crash instead of waiting out the budget.
        if unit.get("ActiveState") == "failed":
            raise GateFailed("unit", f"{UNIT} failed ({unit.get('SubState')})")
        if int(unit.get("NRestarts") or 0) > started_restarts:
            raise GateFailed("unit", f"{UNIT} crashed and was restarted by systemd")
        if unit.get("ActiveState") == "active":
            status, text = http(f"{base}/health", timeout=5.0)
            if status == 200:
                break
            last = f"/health answered {status or text}"
        else:
            last = f"{UNIT} is {unit.get('ActiveState')} ({unit.get('SubState')})"
        if time.monotonic() >= deadline:
            raise GateFailed(
                "health", f"not ready within {SETTINGS.warmup_s:g} s warm-up ({last})"
            )
        time.sleep(0.5)

    status, text = http(
        f"{base}/generate",
        {"text": SETTINGS.prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
        timeout=60.0,
    )
    if status != 200:
        raise GateFailed("generate", f"/generate answered {status or text}")
    try:
        generated = json.loads(text)["text"]
    except (ValueError, KeyError, TypeError):
        raise GateFailed("generate", f"/generate answered no text: {text[:200]}") from None
    if not generated:
        raise GateFailed("generate", "/generate returned an empty completion")

    minimum = SETTINGS.min_spec_accept_length
    if minimum is not None:
        status, text = http(f"{base}/metrics")
        value = metric(text, "sglang:spec_accept_length") if status == 200 else None
        if value is None:
            raise GateFailed("metrics", "sglang:spec_accept_length is missing from /metrics")
        if value < float(minimum):
            raise GateFailed(
                "metrics", f"sglang:spec_accept_length {value:.2f} is below {minimum}"
            )


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            try:
                return float(line.rsplit(None, 1)[1])
            except (IndexError, ValueError):
                return None
    return None


def restart():
    """Restart the unit; return systemd's restart count to detect a crash after it."""
    systemctl("daemon-reload")
    systemctl("reset-failed", UNIT, check=False)
    systemctl("enable", "--quiet", UNIT)  # serve again after a reboot
    systemctl("restart", UNIT)
    return int(unit_properties().get("NRestarts") or 0)


def switch_and_gate(target, previous):
    """Point current at ``target`` and previous at ``previous``, restart, gate."""
    point(CURRENT, target)
    if previous:
        point(PREVIOUS, previous)
    restarts = restart()
    gate(read_release(target), restarts)


def activate(target):
    if not os.path.isfile(os.path.join(RELEASES, target, "release.json")):
        print(f"release {target} is not staged under {RELEASES}", file=sys.stderr)
        return 2
    old_current = release_id_of(CURRENT)
    old_previous = release_id_of(PREVIOUS)
    if old_current == target and unit_properties().get("ActiveState") == "active":
        print(f"release {target} already serving")
        return 0
    keep = old_current if old_current != target else old_previous
    try:
        switch_and_gate(target, keep)
    except GateFailed as failure:
        return roll_back_after(failure, target, old_current, old_previous)
    print(f"release {target} passed its gate")
    return 0


def roll_back_after(failure, failed, old_current, old_previous):
    """Put the old links back, restart, wait until it serves; report the failure."""
    log = journal_tail()
    if not old_current or old_current == failed:
        print(f"gate failed on release {failed}: {failure}; no earlier release to roll back to\n"
              f"last log lines of {UNIT}:\n{log}", file=sys.stderr)
        return 4
    point(CURRENT, old_current)
    point(PREVIOUS, old_previous)
    try:
        gate(read_release(old_current), restart())
        after, status = f"rolled back to {old_current}, which serves again", 1
    except GateFailed as second:
        after, status = f"rolled back to {old_current}, which does not serve either ({second})", 4
    print(f"gate failed on release {failed}: {failure}; {after}\n"
          f"last log lines of {UNIT}:\n{log}", file=sys.stderr)
    return status


def rollback():
    current, previous = release_id_of(CURRENT), release_id_of(PREVIOUS)
    if not previous:
        print("no previous release to roll back to", file=sys.stderr)
        return 2
    try:
        switch_and_gate(previous, current)
    except GateFailed as failure:
        return roll_back_after(failure, previous, current, previous)
    print(f"rolled back to {previous}, which passed its gate")
    return 0


def state():
    """This host's releases, unit state and health, as one JSON object."""
    unit = unit_properties()
    current = release_id_of(CURRENT)
    stack = health = accept_length = None
    if current:
        try:
            release = read_release(current)
            stack = release.get("stack")
            base = f"http://{local_address(release)}:{release['launch']['port']}"
            status, _ = http(f"{base}/health", timeout=3.0)
            health = status or None
            status, text = http(f"{base}/metrics", timeout=3.0)
            accept_length = metric(text, "sglang:spec_accept_length") if status == 200 else None
        except (OSError, ValueError, KeyError):
            pass
    print(json.dumps({
        "current": current,
        "previous": release_id_of(PREVIOUS),
        "stack": stack,
        "active_state": unit.get("ActiveState"),
        "active_since": unit.get("ActiveEnterTimestamp"),
        "health": health,
        "spec_accept_length": accept_length,
        "releases": sorted(r for r in os.listdir(RELEASES) if not r.startswith("."))
        if os.path.isdir(RELEASES) else [],
    }))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sglfleet-release")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("activate").add_argument("release_id")
    sub.add_parser("rollback")
    sub.add_parser("gate")
    sub.add_parser("state")
    parser.add_argument("--wait-lock", type=float, default=None,
                        help="seconds to wait for another run's lock (default: long enough "
                             "for its gate and a rollback, 2 x warm-up + 300)")
    parser.add_argument("--warmup-s", type=float, default=SETTINGS.warmup_s,
                        help="seconds /health may take to turn 200 after a restart")
    parser.add_argument("--prompt", default=SETTINGS.prompt, help="the gate's generation prompt")
    parser.add_argument("--min-spec-accept-length", type=float, default=None,
                        help="lowest sglang:spec_accept_length that passes")
    args = parser.parse_args(argv)
    SETTINGS.__dict__.update(vars(args))

    if args.command == "state":
        return state()

    # The controller's SSH session may end mid-switch (Ctrl-C, a cut link): finish
    # the switch, the gate and any rollback regardless, so no host is left half-switched.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    if args.wait_lock is None:
        args.wait_lock = 2 * args.warmup_s + 300
    os.makedirs(ROOT, exist_ok=True)
    with open(LOCK, "w") as lock:
        deadline = time.monotonic() + args.wait_lock
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    print(f"another sglfleet run holds {LOCK} (waited {args.wait_lock:g} s); "
                          f"try again when it ends", file=sys.stderr)
                    return 3
                time.sleep(0.5)
        if args.command == "activate":
            return activate(args.release_id)
        if args.command == "rollback":
            return rollback()
        current = release_id_of(CURRENT)
        if not current:
            print("no current release", file=sys.stderr)
            return 2
        try:
            gate(read_release(current), int(unit_properties().get("NRestarts") or 0))
        except GateFailed as failure:
            print(f"gate failed on release {current}: {failure}", file=sys.stderr)
            return 1
        print(f"release {current} passes its gate")
        return 0


if __name__ == "__main__":
    sys.exit(main())
