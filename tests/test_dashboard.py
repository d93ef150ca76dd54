"""
files/grafana/sglfleet.json: every series its panels query is one sglang defines
(read from the real 0.5.9 and 0.5.23 wheels' collectors) or one sglfleet's host tool writes.
"""

import json
import os
import re

from sglfleet import FILES
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.host import drift, releases, stacks, textfile
from sglfleet.host.layout import Layout

DASHBOARD = FILES / "grafana" / "sglfleet.json"
COLLECTORS = {"0.5.9": "sglang/srt/metrics/collector.py", "0.5.23": "sglang/srt/observability/metrics_collector.py"}
PROMQL_WORDS = {"sum", "by", "rate", "histogram_quantile", "time", "le", "host", "without", "on", "bool"}


def sglang_series() -> set[str]:
    """Every series name sglang's collectors define, with prometheus_client's suffixes."""
    names = set()
    for version, member in COLLECTORS.items():
        names |= set(re.findall(r'name="(sglang:\w+)"', sglang_file(version, member).read_text()))
    suffixes = ("", "_total", "_bucket", "_sum", "_count")
    return {name + suffix for name in names for suffix in suffixes}


def sglfleet_series(tmp_path) -> set[str]:
    """Every family ``sglfleet.prom`` can hold: a host with a gated, baked release, a drift found and a
    recorded stack build renders them all."""
    layout = Layout(root=str(tmp_path))
    os.makedirs(layout.release("r1"))
    releases.write("r1", "release.json", {"stack": "s"}, layout)
    releases.point(layout.current, "r1")
    releases.record("r1", "startup", {"passed": True, "figures": {"spec_accept_length": 2.0}}, layout)
    releases.record("r1", "bake", {"verdict": "pass", "figures": {
        "requests": 1, "ttft_p99_s": 0.1, "itl_p99_s": 0.01, "error_rate": 0.0, "spec_accept_length": 2.0}}, layout)
    drift.mark("stack", layout)
    os.makedirs(layout.stack("s"))
    with open(layout.stack("s", stacks.BUILD), "w") as handle:
        json.dump({"started": 1.0, "finished": 2.0}, handle)
    return set(re.findall(r"^# TYPE (\w+) ", textfile.render(layout), re.M))


def queried(dashboard: dict) -> set[str]:
    """The series names in the panels' and variables' PromQL."""
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [variable["query"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    names = set()
    for expr in exprs:
        expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)  # label matchers, ranges, strings
        names |= {word for word in re.findall(r"[A-Za-z_:][\w:]*", expr) if word not in PROMQL_WORDS}
    return names - {"label_values"}


def test_every_queried_series_is_sglangs_or_sglfleets(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    known = sglang_series() | sglfleet_series(tmp_path)
    names = queried(dashboard)
    assert names and names <= known, sorted(names - known)
    # The panels the fleet's operators asked for: accept length from the gauge and, where the
    # version counts verify passes, from the counters; sglfleet's release and verdicts.
    for name in ("sglang:spec_accept_length", "sglang:spec_verify_calls_total", "sglang:generation_tokens_total",
                 "sglang:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
                 "sglfleet_release_info", "sglfleet_gate_passed", "sglfleet_bake_verdict", "sglfleet_drift",
                 "sglfleet_drift_found_timestamp_seconds", "sglfleet_stack_build_duration_seconds"):
        assert name in names, name
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
