"""
Known advisories (files/advisories.toml, issue 41 part 6): the table held to the real wheels, the
verdict on a host as data, and what ``sglfleet lint`` says of them. No host is reached: lint
never connects.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglfleet import PROJECT_ROOT
from sglfleet.artifacts.patchsets import load_sets
from sglfleet.artifacts.upstream import sglang_file
from sglfleet.plan.advisories import (CLOSED_BY_SETS, NOT_AFFECTED, NOT_REACHED, NOT_READ, OPEN, AdvisoryError,
                                      load_advisories, verdict)
from sglfleet.plan.validation import check_inventory, load_inventory, parse_data

SETS = load_sets()
ADVISORIES = {a.id: a for a in load_advisories(set_names={s.name for s in SETS})}
SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))
PROD = str(PROJECT_ROOT / "inventory" / "prod.py")

# What each advisory's cited text holds in every release read: a marker that places the citation,
# the mark of the exposure where the release is affected, and the mark of its absence elsewhere.
EVIDENCE = {
    "sglang-server-info-keys": ('@app.get("/server_info")', "async def server_info", None),
    "sglang-lora-from-tensors-unauthenticated": ('"/load_lora_adapter_from_tensors"', None,
                                                 "@auth_level(AuthLevel.ADMIN_OPTIONAL)"),
    "sglang-rerank-template-injection": ("Environment(", "jinja2.Environment(", "ImmutableSandboxedEnvironment("),
    "sglang-multimodal-broker-all-interfaces": ("broker_endpoint = ", 'f"tcp://*:', 'f"tcp://127.0.0.1:'),
}


def test_every_advisory_is_declared_and_read_in_every_release_the_stacks_serve():
    assert list(ADVISORIES) == list(EVIDENCE)
    for advisory in ADVISORIES.values():
        # The stacks' releases (0.5.9, 0.5.23), the GPU records' (0.5.14), and every release between.
        assert advisory.read[0] == "0.5.9" and advisory.read[-1] == "0.5.23" and len(advisory.read) == 19
        assert set(advisory.source) == set(advisory.read)


@pytest.mark.parametrize("advisory_id, version", [(a.id, v) for a in ADVISORIES.values() for v in a.read])
def test_each_cited_line_says_what_the_table_declares(advisory_id, version):
    advisory = ADVISORIES[advisory_id]
    path, first, last = re.match(r"(\S+):(\d+)(?:-(\d+))?", advisory.source[version]).groups()
    lines = sglang_file(version, path).read_text().splitlines()
    cited = "\n".join(lines[int(first) - 1:int(last or first)])
    where, exposed, absent = EVIDENCE[advisory_id]
    assert where in cited, (path, first, last)
    affected = version in advisory.affected
    if exposed:
        assert (exposed in cited) == affected
    if absent:
        assert (absent in cited) == (not affected)
    if advisory_id == "sglang-server-info-keys":  # no decorator but the route's: NORMAL
        assert "auth_level" not in cited and cited.count("@") == 1


def test_fixed_is_the_first_release_read_that_is_not_affected():
    for advisory in ADVISORIES.values():
        clean = [v for v in advisory.read if v not in advisory.affected]
        assert advisory.fixed == (clean[0] if clean else "")
        assert advisory.read[:len(advisory.affected)] == advisory.affected  # affected up to the fix, none after


# --- the verdict on one host, as data -------------------------------------------------------

LORA = ["--enable-lora"]
VERDICTS = [
    # advisory, release, the host's sets (applied, skipped), flags -> status
    ("sglang-server-info-keys", "0.5.9", ["server_info_keys_redacted"], [], [], CLOSED_BY_SETS),
    ("sglang-server-info-keys", "0.5.9", [], ["server_info_keys_redacted"], [], OPEN),
    ("sglang-server-info-keys", "0.5.23", ["server_info_keys_redacted_watermark", "launch_command_keys_redacted"],
     [], [], CLOSED_BY_SETS),
    # the launch command still carries the key: one of the two is not enough
    ("sglang-server-info-keys", "0.5.23", ["server_info_keys_redacted_watermark"], ["launch_command_keys_redacted"],
     [], OPEN),
    ("sglang-server-info-keys", "0.5.19", [], [], [], OPEN),  # no set fits 0.5.17 to 0.5.21
    ("sglang-server-info-keys", "0.5.8", [], [], [], NOT_READ),
    ("sglang-lora-from-tensors-unauthenticated", "0.5.9", [], [], [], NOT_REACHED),
    ("sglang-lora-from-tensors-unauthenticated", "0.5.9", [], [], LORA, OPEN),
    ("sglang-lora-from-tensors-unauthenticated", "0.5.21", [], [], ["--lora-paths=a=/loras/a"], OPEN),
    ("sglang-lora-from-tensors-unauthenticated", "0.5.22", [], [], LORA, NOT_AFFECTED),
    ("sglang-rerank-template-injection", "0.5.10.post1", ["rerank_template_sandboxed"], [], [], CLOSED_BY_SETS),
    ("sglang-rerank-template-injection", "0.5.9", [], ["rerank_template_sandboxed"], [], OPEN),
    ("sglang-rerank-template-injection", "0.5.11", ["rerank_template_sandboxed"], [], [], NOT_AFFECTED),
    ("sglang-multimodal-broker-all-interfaces", "0.5.9", [], [], LORA, NOT_REACHED),
    ("sglang-multimodal-broker-all-interfaces", "0.5.10", [], [], [], NOT_AFFECTED),
]


@pytest.mark.parametrize("advisory_id, version, applied, skipped, flags, status", VERDICTS)
def test_verdict(advisory_id, version, applied, skipped, flags, status):
    advisory = ADVISORIES[advisory_id]
    naming = {s.name for s in SETS if version in s.versions and s.name in advisory.patch_sets}
    assert naming == set(applied) | set(skipped)  # the cases name the sets the release really has
    found = verdict(advisory, version, naming, set(applied), flags)
    assert found.status == status
    if status == OPEN:
        assert found.is_open and (f"skips {', '.join(skipped)}" in found.why if skipped else True)


# --- sglfleet lint ----------------------------------------------------------------------------


def lint_prod(*pairs) -> tuple[list[str], list]:
    accounting: list = []
    lines = check_inventory(load_inventory(PROD, parse_data(pairs)), accounting=accounting)
    return [line for line in lines if ": warning: advisory: " in line], accounting


def test_prod_with_the_shipped_sets_has_every_advisory_of_0_5_9_closed_and_says_why():
    warnings, accounting = lint_prod()
    assert warnings == []
    hosts = {host for host, *_ in accounting}
    assert len(hosts) == 8  # the serving hosts; the gateway runs no sglang
    seen = {(advisory.id, found.status, found.why) for _, version, advisory, found in accounting}
    assert {version for _, version, *_ in accounting} == {"0.5.9"}
    assert seen == {
        ("sglang-server-info-keys", CLOSED_BY_SETS, "server_info_keys_redacted"),
        ("sglang-lora-from-tensors-unauthenticated", NOT_REACHED, "the launch has none of --enable-lora, --lora-paths"),
        ("sglang-rerank-template-injection", CLOSED_BY_SETS, "rerank_template_sandboxed"),
        ("sglang-multimodal-broker-all-interfaces", NOT_REACHED,
         ADVISORIES["sglang-multimodal-broker-all-interfaces"].not_reached)}


def test_prod_lists_the_open_ones_one_line_each_with_its_hosts():
    warnings, _ = lint_prod('patch_sets_skip=["server_info_keys_redacted", "rerank_template_sandboxed"]',
                            'extra_flags=["--enable-lora"]')
    assert [line.split(": warning: advisory: ")[1].split(":")[0] for line in warnings] == [
        "sglang-server-info-keys", "sglang-lora-from-tensors-unauthenticated", "sglang-rerank-template-injection"]
    for line in warnings:
        hosts = line.split(": warning: ")[0].split(", ")
        assert len(hosts) == 8 and hosts[0] == "gpu-canary-01.example.internal"  # one line, every host
        assert ": sglang 0.5.9: " in line and "; closed by " in line
    server_info, lora, rerank = warnings
    assert "answer the server's api_key and admin_api_key" in server_info
    assert "this host skips server_info_keys_redacted (patch_sets_skip)" in server_info
    assert "no sglang release fixes it yet" in server_info
    assert "this host launches with --enable-lora" in lora and "fixed in sglang 0.5.22" in lora
    assert "this host skips rerank_template_sandboxed" in rerank and "fixed in sglang 0.5.11" in rerank


def test_the_command_prints_the_open_ones_as_warnings_and_the_closed_ones_apart():
    result = subprocess.run([SGLFLEET, "lint", PROD, "--data", 'patch_sets_skip=["rerank_template_sandboxed"]'],
                            capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT)
    open_ = [line for line in result.stdout.splitlines() if ": warning: advisory: " in line]
    assert len(open_) == 1 and ": warning: advisory: sglang-rerank-template-injection: sglang 0.5.9: " in open_[0]
    closed = [line for line in result.stderr.splitlines() if line.startswith("sglfleet lint: advisory ")]
    assert [line.split(" (sglang 0.5.9): ")[0] for line in closed] == [
        "sglfleet lint: advisory sglang-server-info-keys", "sglfleet lint: advisory sglang-lora-from-tensors-unauthenticated",
        "sglfleet lint: advisory sglang-multimodal-broker-all-interfaces"]
    assert "closed by patch sets: server_info_keys_redacted (gpu-canary-01.example.internal, " in closed[0]


# --- the declaration -------------------------------------------------------------------------

GOOD = '''[[advisory]]
id = "x"
exposed = "e"
read = ["0.5.9", "0.5.10"]
affected = ["0.5.9"]
fixed = "0.5.10"
closes = "c"
patch_sets = []
not_reached = ""
references = []
[advisory.source]
"0.5.9" = "a.py:1"
"0.5.10" = "a.py:2"
'''


@pytest.mark.parametrize("change, message", [
    (('fixed = "0.5.10"', 'fixed = "0.5.10"\ncolour = "red"'), "unknown key colour"),
    (('closes = "c"\n', ''), "lacks closes"),
    (('affected = ["0.5.9"]', 'affected = ["0.5.8"]'), "affected release 0.5.8 is not in `read`: read it first"),
    (('"0.5.10" = "a.py:2"\n', ''), "release 0.5.10 is read but `source` cites no line of it"),
    (('patch_sets = []', 'patch_sets = ["no_such_set"]'), "patch set no_such_set is not a shipped set"),
    (('fixed = "0.5.10"', 'fixed = "0.5.9"'), "release 0.5.9 is both affected and `fixed`"),
    (('not_reached = ""', 'not_reached = ""\nreached_with = ["enable-lora"]'), "`reached_with` lists sglang flags"),
    (('id = "x"', 'id = "x"\n[[advisory]]\nid = "x"'), "lacks"),
])
def test_a_wrong_declaration_is_one_line_naming_the_advisory(tmp_path, change, message):
    path = tmp_path / "advisories.toml"
    path.write_text(GOOD)
    assert [a.id for a in load_advisories(path, set_names=set())] == ["x"]
    path.write_text(GOOD.replace(*change, 1))
    with pytest.raises(AdvisoryError) as error:
        load_advisories(path, set_names=set())
    assert str(error.value).startswith("advisor") and message in str(error.value) and "\n" not in str(error.value)
