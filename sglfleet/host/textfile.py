"""
This host's release state for node_exporter's textfile collector: ``sglfleet.prom``.

The host tool writes it after every switch, gate, bake, revert and rollback,
and when a converge finds drift or clears it (``drift.py``), as the collector
asks: a temporary file in the same folder, then rename(2), and no timestamps
on samples. The folder is ``--collector.textfile.directory``;
Debian's ``prometheus-node-exporter`` reads ``/var/lib/prometheus/node-exporter``.
Names follow Prometheus's conventions (base units, ``_info`` for a series that
carries labels, ``_timestamp_seconds``); ``promtool check metrics`` lints them.

    sglfleet_release_info{previous="9c41...",release="3f2a...",service="sglang",stack="dev-0a24..."} 1
    sglfleet_release_switch_timestamp_seconds{service="sglang"} 1796136244.67
    sglfleet_gate_passed{release="3f2a...",service="sglang"} 1
    sglfleet_bake_verdict{release="3f2a...",service="sglang",verdict="pass"} 1
    sglfleet_drift{kind="stack"} 0
    sglfleet_drift_found_timestamp_seconds{kind="stack"} 1796136101.2
    sglfleet_stack_build_duration_seconds{stack="dev-0a24..."} 41.7
    sglfleet_stack_build_timestamp_seconds{stack="dev-0a24..."} 1796136143.0

The gate and bake series are the last verdict this host recorded (the newest
``verdict.json``), which after a failed canary is the release that failed.
The drift series are what converges found changed by hand (``drift.py``); the
build series, each stack on the host that recorded its build. Both are the
host's, not a service's: they are in ``sglfleet.prom`` alone.

**Example:**

.. code:: python

    write(LAYOUT, "/var/lib/prometheus/node-exporter")
"""

from __future__ import annotations

import contextlib
import os

from . import drift, releases
from .layout import LAYOUT, Layout
from .stacks import builds

# The host tool's own default, for a command line without --textfile-dir: all.py's textfile_dir
# (tests/test_release.py holds them equal; a host cannot read all.py).
DEFAULT_DIR = "/var/lib/prometheus/node-exporter"
FILE = "sglfleet.prom"
VERDICTS = ("pass", "fail", "inconclusive")
# bake figure -> (metric, help)
BAKE_FIGURES = {
    "ttft_p99_s": ("sglfleet_bake_ttft_p99_seconds", "Time to first token, p99, over the last bake."),
    "itl_p99_s": ("sglfleet_bake_itl_p99_seconds", "Inter-token latency, p99, over the last bake."),
    "error_rate": ("sglfleet_bake_error_ratio", "Share of failed generation requests during the last bake."),
    "spec_accept_length": ("sglfleet_bake_spec_accept_length", "EAGLE accept length over the last bake."),
    "requests": ("sglfleet_bake_requests", "Requests that finished during the last bake."),
}


def _labels(**labels: str) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{name}="{escape(str(value))}"' for name, value in sorted(labels.items())) + "}"


def _family(name: str, help_text: str, samples: list[tuple[dict, float]]) -> list[str]:
    if not samples:
        return []
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    return lines + [f"{name}{_labels(**labels)} {float(value)!r}" for labels, value in samples]


def _last_verdict(layout: Layout) -> tuple[str | None, dict]:
    """The release whose verdict.json was written last, and that verdict."""
    newest, found = -1.0, (None, {})
    for name in os.listdir(layout.releases) if os.path.isdir(layout.releases) else []:
        path = layout.release(name, "verdict.json")
        try:
            written = os.stat(path).st_mtime
        except OSError:
            continue
        if written > newest:
            verdict = releases.read(name, "verdict.json", layout, default={}) or {}
            newest, found = written, (name, verdict if isinstance(verdict, dict) else {})
    return found


def render(layout: Layout = LAYOUT) -> str:
    """The text of ``sglfleet.prom`` for this host's service, as it stands now."""
    service = layout.service
    current = releases.release_id_of(layout.current)
    previous = releases.release_id_of(layout.previous)
    release = (releases.read(current, "release.json", layout, default={}) or {}) if current else {}
    lines = _family("sglfleet_release_info", "The release a service serves, its stack and the release before it.",
                    [({"service": service, "release": current, "stack": release.get("stack") or "",
                       "previous": previous or ""}, 1)] if current else [])
    try:
        switched = os.lstat(layout.current).st_mtime  # the link renamed into place at the switch
    except OSError:
        switched = None
    lines += _family("sglfleet_release_switch_timestamp_seconds", "When current last moved to its release.",
                     [({"service": service}, switched)] if switched is not None else [])

    last, verdict = _last_verdict(layout)
    startup, baked = verdict.get("startup") or {}, verdict.get("bake") or {}
    where = {"service": service, "release": last or ""}
    lines += _family("sglfleet_gate_passed", "Whether the last start-up gate passed (1) or failed (0).",
                     [(where, 1 if startup.get("passed") else 0)] if startup else [])
    accept = (startup.get("figures") or {}).get("spec_accept_length")
    lines += _family("sglfleet_gate_spec_accept_length", "EAGLE accept length of the last start-up gate's generations.",
                     [(where, accept)] if accept is not None else [])
    lines += _family("sglfleet_bake_verdict", "The last bake's verdict: 1 for the one it gave.",
                     [({**where, "verdict": name}, 1 if baked.get("verdict") == name else 0) for name in VERDICTS]
                     if baked else [])
    figures = baked.get("figures") or {}
    for figure, (name, help_text) in BAKE_FIGURES.items():
        if figures.get(figure) is not None:
            lines += _family(name, help_text, [(where, figures[figure])])
    if layout.service == "sglang" and os.path.isdir(layout.root):  # a host sglfleet has set up
        lines += _host_families(layout)
    return "\n".join(lines) + "\n" if lines else ""


def _host_families(layout: Layout) -> list[str]:
    """The series of the host rather than of a service: drift, and the stacks' builds."""
    drifted, found = drift.samples(layout)
    lines = _family("sglfleet_drift", "Whether a converge found this kind changed by hand and has not repaired it yet.",
                    drifted)
    lines += _family("sglfleet_drift_found_timestamp_seconds", "When a converge last found this kind changed by hand.",
                     found)
    built = builds(layout.stacks)
    lines += _family("sglfleet_stack_build_duration_seconds", "How long the stack's build and verification took.",
                     [({"stack": stack}, seconds) for stack, seconds, _ in built])
    lines += _family("sglfleet_stack_build_timestamp_seconds", "When the stack's build finished.",
                     [({"stack": stack}, finished) for stack, _, finished in built])
    return lines


def file_name(layout: Layout) -> str:
    """The service's file in the textfile folder: ``sglfleet.prom``, or ``sglfleet-sglang-<name>.prom``."""
    return FILE if layout.service == "sglang" else f"sglfleet-{layout.service}.prom"


def retired(layout: Layout = LAYOUT, directory: str = DEFAULT_DIR) -> None:
    """
    Take a retired service's series out of ``directory``: a named service's file goes; the
    host's one service leaves ``sglfleet.prom`` with the host's series only.
    """
    if not layout.legacy:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, file_name(layout)))
    else:
        write(layout, directory)


def write(layout: Layout = LAYOUT, directory: str = DEFAULT_DIR) -> str | None:
    """
    Write ``sglfleet.prom`` atomically into ``directory``; its path, or None when
    the folder does not exist (no node_exporter reads one there).
    """
    if not os.path.isdir(directory):
        return None
    name = file_name(layout)
    final = os.path.join(directory, name)
    temporary = os.path.join(directory, f".{name}.{os.getpid()}")  # the collector reads *.prom only
    with open(temporary, "w") as handle:
        handle.write(render(layout))
    os.chmod(temporary, 0o644)
    os.rename(temporary, final)
    return final
