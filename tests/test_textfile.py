"""``sglfleet.prom`` for node_exporter's textfile collector: what it holds, and promtool's lint of it."""

import os
import subprocess
import time

import pytest

from sglfleet.host import cli, drift, releases, stacks, textfile
from sglfleet.host.layout import Layout


def host(tmp_path) -> Layout:
    """A host whose canary release ``new1`` failed its gate; ``old1`` (on stack dev-a) serves, baked."""
    layout = Layout(root=str(tmp_path / "opt"))
    for release_id in ("old0", "old1", "new1"):
        os.makedirs(layout.release(release_id))
        releases.write(release_id, "release.json", {"stack": "dev-a", "release_id": release_id}, layout)
    releases.point(layout.current, "old1")
    releases.point(layout.previous, "old0")
    releases.record("old1", "startup", {"passed": True, "figures": {"spec_accept_length": 2.78}}, layout)
    releases.record("old1", "bake", {"verdict": "pass", "passed": True, "figures": {
        "requests": 120, "ttft_p99_s": 0.31, "itl_p99_s": 0.012, "error_rate": 0.0, "spec_accept_length": 2.8}},
        layout)
    time.sleep(0.01)  # the failed canary's verdict is the newer one
    releases.record("new1", "startup", {"passed": False, "failure": "unit: crashed"}, layout)
    return layout


def samples(text: str) -> dict[str, list[str]]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split()[0]
            found.setdefault(name, []).append(line)
    return found


def test_the_file_names_the_serving_release_and_the_last_verdicts(tmp_path):
    layout = host(tmp_path)
    text = textfile.render(layout)
    found = samples(text)
    assert found["sglfleet_release_info"] == [
        'sglfleet_release_info{previous="old0",release="old1",service="sglang",stack="dev-a"} 1.0']
    switched = float(found["sglfleet_release_switch_timestamp_seconds"][0].split()[-1])
    assert abs(switched - time.time()) < 60
    # The last gate is the canary's that failed; the last bake is the serving release's.
    assert found["sglfleet_gate_passed"] == ['sglfleet_gate_passed{release="new1",service="sglang"} 0.0']
    assert "sglfleet_gate_spec_accept_length" not in found
    assert "sglfleet_bake_verdict" not in found  # new1 has no bake: the newest verdict holds none


def test_a_baked_release_shows_its_figures(tmp_path):
    layout = host(tmp_path)
    os.remove(layout.release("new1", "verdict.json"))  # as if the canary's release were collected
    found = samples(textfile.render(layout))
    assert found["sglfleet_gate_passed"] == ['sglfleet_gate_passed{release="old1",service="sglang"} 1.0']
    assert found["sglfleet_gate_spec_accept_length"] == [
        'sglfleet_gate_spec_accept_length{release="old1",service="sglang"} 2.78']
    assert found["sglfleet_bake_verdict"] == [
        'sglfleet_bake_verdict{release="old1",service="sglang",verdict="pass"} 1.0',
        'sglfleet_bake_verdict{release="old1",service="sglang",verdict="fail"} 0.0',
        'sglfleet_bake_verdict{release="old1",service="sglang",verdict="inconclusive"} 0.0']
    assert found["sglfleet_bake_ttft_p99_seconds"][0].endswith(" 0.31")
    assert found["sglfleet_bake_requests"][0].endswith(" 120.0")


def test_promtool_accepts_every_name_and_the_write_is_a_rename(tmp_path):
    layout = host(tmp_path)
    os.remove(layout.release("new1", "verdict.json"))
    collector = tmp_path / "node-exporter"
    assert textfile.write(layout, str(collector)) is None  # no collector folder: nothing written
    collector.mkdir()
    path = textfile.write(layout, str(collector))
    assert os.listdir(collector) == ["sglfleet.prom"] and oct(os.stat(path).st_mode & 0o777) == "0o644"
    text = open(path).read()
    assert text == textfile.render(layout)
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0 and lint.stdout + lint.stderr == "", lint.stdout + lint.stderr
    # Another service on the host writes its own file beside it.
    other = Layout(root=str(tmp_path / "opt"), service="sglang-b")
    assert os.path.basename(textfile.write(other, str(collector))) == "sglfleet-sglang-b.prom"


def test_a_retired_service_takes_its_series_along_and_the_host_keeps_its_own(tmp_path):
    layout = host(tmp_path)
    collector = tmp_path / "node-exporter"
    collector.mkdir()
    named = layout.for_service("b")
    textfile.write(layout, str(collector)), textfile.write(named, str(collector))
    textfile.retired(named, str(collector))
    assert os.listdir(collector) == ["sglfleet.prom"]
    textfile.retired(named, str(collector))  # once more: nothing left to take
    # The host's one service retired (its links gone): its series go, the host's drift stays.
    os.remove(layout.current), os.remove(layout.previous)
    textfile.retired(layout, str(collector))
    found = samples((collector / "sglfleet.prom").read_text())
    assert "sglfleet_release_info" not in found and "sglfleet_release_switch_timestamp_seconds" not in found
    assert found["sglfleet_drift"] == [f'sglfleet_drift{{kind="{kind}"}} 0.0' for kind in drift.KINDS]


def test_a_host_with_nothing_serving_writes_an_empty_file(tmp_path):
    layout = Layout(root=str(tmp_path / "opt"))
    assert textfile.render(layout) == ""



def test_drift_is_marked_when_found_and_cleared_once_repaired(tmp_path):
    layout = host(tmp_path)
    found = samples(textfile.render(layout))
    assert found["sglfleet_drift"] == [f'sglfleet_drift{{kind="{kind}"}} 0.0' for kind in drift.KINDS]
    assert "sglfleet_drift_found_timestamp_seconds" not in found  # never found

    collector = tmp_path / "node-exporter"
    collector.mkdir()
    assert cli.main(["drift", "found", "stack", "--textfile-dir", str(collector)], layout) == 0
    text = (collector / "sglfleet.prom").read_text()
    found = samples(text)
    assert 'sglfleet_drift{kind="stack"} 1.0' in found["sglfleet_drift"]
    assert 'sglfleet_drift{kind="release"} 0.0' in found["sglfleet_drift"]
    [at] = found["sglfleet_drift_found_timestamp_seconds"]
    assert at.startswith('sglfleet_drift_found_timestamp_seconds{kind="stack"} ')
    assert abs(float(at.split()[-1]) - time.time()) < 60
    # The release series are still there: the drift rewrite renders the whole file.
    assert found["sglfleet_release_info"] == samples(textfile.render(layout))["sglfleet_release_info"]

    assert cli.main(["drift", "clear", "--textfile-dir", str(collector)], layout) == 0
    found = samples((collector / "sglfleet.prom").read_text())
    assert found["sglfleet_drift"] == [f'sglfleet_drift{{kind="{kind}"}} 0.0' for kind in drift.KINDS]
    assert found["sglfleet_drift_found_timestamp_seconds"] == [at]  # when it was last found stays
    assert sorted(os.listdir(collector)) == ["sglfleet.prom"] and not any(
        name.endswith(".tmp") for name in os.listdir(layout.root))
    with pytest.raises(SystemExit):  # a kind sglfleet does not find
        cli.main(["drift", "found", "unit", "--textfile-dir", str(collector)], layout)


def test_a_stack_build_shows_its_duration_and_when_it_finished(tmp_path):
    layout = host(tmp_path)
    os.makedirs(layout.stack("dev-a"))
    # The build script's own record (sglfleet.plan.stack_commands.build_commands), run by a real shell.
    subprocess.run(["sh", "-c", "started=1796136100.25; " + stacks.build_record_command(layout.stack("dev-a"))],
                   check=True)
    os.makedirs(layout.stack("dev-old"))  # built before builds were recorded: no series
    os.makedirs(layout.stack(".build-dev-b"))  # a build in progress
    found = samples(textfile.render(layout))
    [duration] = found["sglfleet_stack_build_duration_seconds"]
    [finished] = found["sglfleet_stack_build_timestamp_seconds"]
    assert duration.startswith('sglfleet_stack_build_duration_seconds{stack="dev-a"} ')
    assert abs(float(finished.split()[-1]) - time.time()) < 60
    assert float(duration.split()[-1]) == float(finished.split()[-1]) - 1796136100.25
    # A later rewrite (a switch, a drift mark) keeps them: they are read from the stack's folder.
    drift.mark("model", layout)
    assert samples(textfile.render(layout))["sglfleet_stack_build_duration_seconds"] == [duration]


def test_promtool_accepts_the_drift_and_build_series(tmp_path):
    layout = host(tmp_path)
    os.makedirs(layout.stack("dev-a"))
    subprocess.run(["sh", "-c", "started=1796136100; " + stacks.build_record_command(layout.stack("dev-a"))],
                   check=True)
    drift.mark("release", layout)
    text = textfile.render(layout)
    assert {"sglfleet_drift", "sglfleet_drift_found_timestamp_seconds", "sglfleet_stack_build_duration_seconds",
            "sglfleet_stack_build_timestamp_seconds"} <= set(samples(text))
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0 and lint.stdout + lint.stderr == "", lint.stdout + lint.stderr
    # Another service's file holds none of the host's series: node_exporter would see them twice.
    other = Layout(root=layout.root, service="sglang-b")
    assert "sglfleet_drift" not in textfile.render(other)
