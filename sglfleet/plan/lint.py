"""The launch-configuration lint: what sglang would refuse or silently change, said before a restart. Pure.

A function of a host's validated config, the stack's sglang flag set (read
from that release's own ``server_args.py`` by ``sglfleet.shipped.server_flags``), the
host's GPU compute capabilities and the sglang version. Every finding names the
host, the key and the fix.

**Example:**

.. code:: python

    for finding in lint("gpu-canary-01", config, flags, ["12.0"] * 8, "0.5.9"):
        print(finding)   # gpu-canary-01: error: enable_torch_symm_mem: ...
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import Version

from sglfleet.artifacts.models import PINNED, ROLES, ModelError, is_hub_id, load_manifest, lock_command, staged_models
from sglfleet.plan.parsers import NAME_MODULES, parser_choices
from sglfleet.plan.multinode import gpus_per_host
from sglfleet.plan.settings import LAUNCH_KEYS, LaunchSettings, rendered_keys
from sglfleet.shipped.server_flags import NO_VALUE_ACTIONS

EAGLE_NUMBERS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
KIMI_K25_MODEL = re.compile(r"kimi[-_.]?k2[-_.]?5", re.I)
# sglang < 0.5.14 indexes TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (entries for
# capability 9 and 10 only) with [major]: KeyError 12 at start-up on SM120.
SYMM_MEM_SM120_FIXED = Version("0.5.14")
# The patch set that backports that fix (sgl-project/sglang#24548) to older releases.
SYMM_MEM_BACKPORT = "sm120_symm_mem"


@dataclass(frozen=True)
class Finding:
    """One lint result: ``error`` stops the run before any host changes, ``warning`` does not."""

    severity: Literal["error", "warning"]
    host: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.host}: {self.severity}: {self.key}: {self.message}"


def _majors(compute_caps: list[str] | None) -> set[int]:
    return {int(str(cap).split(".")[0]) for cap in compute_caps or []}


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else "remove it or fix the spelling"


def _flag_findings(host: str, config, flagset, version: str) -> list[Finding]:
    """Every rendered flag exists in this sglang; extra_flags values fit their flag."""
    findings = []
    options = flagset.options
    for key in rendered_keys(config.launch):
        value = getattr(config.launch, key)
        flag = LaunchSettings.flag(key)
        if value is not None and value is not False and flag not in options:
            close = difflib.get_close_matches(flag, list(options), n=1, cutoff=0.8)
            instead = (f"set {key} = None and pass {close[0]} in extra_flags (its closest flag in "
                       f"{version}), or use a stack whose sglang has {flag}") if close else \
                f"remove {key} or use a stack whose sglang has it"
            findings.append(Finding("error", host, key, f"{flag} is not a flag of sglang {version}; {instead}"))
        elif flag in NAME_MODULES and value is not None:
            findings += _parser_findings(host, key, flag, value, flagset, version)
        elif key == "disaggregation_transfer_backend" and flag in options:
            findings += _backend_findings(host, value, options[flag], version)

    schema_flags = {LaunchSettings.flag(key): key for key in LAUNCH_KEYS}
    dests = {options[LaunchSettings.flag(key)].dest: key for key in LAUNCH_KEYS if LaunchSettings.flag(key) in options}
    tokens = list(config.launch.extra_flags)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token.startswith("-"):
            findings.append(Finding("error", host, "extra_flags", f"{token!r} is a value without a flag; "
                                    f"put it after its flag or remove it"))
            continue
        name, has_inline, inline = token.partition("=")
        spec = options.get(name)
        full = _unabbreviated(name, options) if spec is None else None
        if full:
            # sglang's parser has allow_abbrev on: it takes the prefix, and a release
            # that adds a flag with the same prefix makes it ambiguous.
            findings.append(Finding("error", host, "extra_flags", f"{name} is an abbreviation of {full}, which "
                                    f"sglang {version} accepts; write {full} in full"))
            spec = options[full]
        if spec is None:
            findings.append(Finding("error", host, "extra_flags", f"{name} is not a flag of sglang {version}; "
                                    f"{_suggest(name, options)}"))
            while i < len(tokens) and not tokens[i].startswith("-"):
                i += 1
            continue
        owner = schema_flags.get(name) or dests.get(spec.dest)
        if owner:
            findings.append(Finding("error", host, "extra_flags", f"{name} is set through the key {owner}; "
                                    f"set {owner} instead and remove it from extra_flags"))
        if spec.action in NO_VALUE_ACTIONS:
            if has_inline:
                findings.append(Finding("error", host, "extra_flags", f"{name} takes no value; write just {name}"))
            continue
        if has_inline:
            values = [inline]
        elif spec.nargs in ("+", "*"):
            values = []
            while i < len(tokens) and not tokens[i].startswith("--"):
                values.append(tokens[i])
                i += 1
        else:
            count = spec.nargs if isinstance(spec.nargs, int) else (0 if spec.nargs == "?" else 1)
            values = tokens[i:i + count]
            i += len(values)
            if len(values) < count:
                findings.append(Finding("error", host, "extra_flags", f"{name} needs a value; "
                                        f"add it after the flag, e.g. [\"{name}\", \"...\"]"))
                continue
        for value in values:
            findings += _value_findings(host, name, spec, value)
    return findings


def _parser_findings(host: str, key: str, flag: str, value: str, flagset, version: str) -> list[Finding]:
    """``reasoning_parser`` and ``tool_call_parser`` name a parser the stack's sglang has."""
    choices = parser_choices(version, flagset, flag)
    if choices is None:
        return [Finding("warning", host, key, f"the {flag} choices of sglang {version} could not be read "
                        f"from its wheel; {value!r} is not checked")]
    if value in choices:
        return []
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"pick one of {', '.join(choices)}"
    return [Finding("error", host, key, f"{value!r} is not a {flag} of sglang {version}; {hint}")]


def _backend_findings(host: str, value: str, spec, version: str) -> list[Finding]:
    """A PD server's transfer backend is one its sglang offers, and a transport."""
    key = "disaggregation_transfer_backend"
    if spec.choices is not None and value not in spec.choices:
        close = difflib.get_close_matches(value, spec.choices, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"pick one of {', '.join(spec.choices)}"
        return [Finding("error", host, key, f"{value!r} is not a backend of sglang {version}; {hint}")]
    if value == "fake":
        # sglang's warm-up stand-in (srt/disaggregation/fake/conn.py); the prefill refuses to serve with it.
        return [Finding("error", host, key, "'fake' moves no KV cache: it is sglang's warm-up backend, not a "
                        "transport; use \"mooncake\" or \"nixl\"")]
    return []


def _unabbreviated(name: str, options) -> str | None:
    """The one long option ``name`` abbreviates, as argparse's allow_abbrev finds it, else None."""
    if not name.startswith("--"):
        return None
    matches = [option for option in options if option.startswith("--") and option.startswith(name)]
    return matches[0] if len(matches) == 1 else None


def _value_findings(host: str, name: str, spec, value: str) -> list[Finding]:
    if spec.choices is not None and value not in [str(choice) for choice in spec.choices]:
        shown = ", ".join(str(choice) for choice in spec.choices[:12]) + (", ..." if len(spec.choices) > 12 else "")
        return [Finding("error", host, "extra_flags", f"{name} {value}: not one of {shown}; pick one of them")]
    converters = {"int": int, "float": float}
    if spec.type in converters:
        try:
            converters[spec.type](value)
        except ValueError:
            return [Finding("error", host, "extra_flags", f"{name} {value}: not a valid {spec.type}; "
                            f"give a number")]
    return []


def _speculative_findings(host: str, config) -> list[Finding]:
    findings = []
    given = [key for key in EAGLE_NUMBERS if getattr(config.launch, key) is not None]
    if given and len(given) < len(EAGLE_NUMBERS):
        missing = [key for key in EAGLE_NUMBERS if key not in given]
        findings.append(Finding("error", host, missing[0], f"{', '.join(given)} given without {', '.join(missing)}: "
                                f"set all three or none (sglang then picks 3, 1, 4); "
                                f"sglang 0.5.9 fails at start-up otherwise"))
    steps, topk, draft = (getattr(config.launch, key) for key in EAGLE_NUMBERS)
    if topk == 1 and steps is not None and draft is not None and draft != steps + 1:
        findings.append(Finding("error", host, "speculative_num_draft_tokens",
                                f"= {draft}, but with speculative_eagle_topk = 1 sglang forces it to "
                                f"speculative_num_steps + 1 = {steps + 1}; set speculative_num_draft_tokens = {steps + 1}"))

    algorithm = config.launch.speculative_algorithm
    if algorithm is None:
        stray = given + (["speculative_draft_model_path"] if config.launch.speculative_draft_model_path else [])
        if stray:
            findings.append(Finding("warning", host, stray[0], f"{', '.join(stray)} ignored without "
                                    f"speculative_algorithm; set speculative_algorithm = \"EAGLE3\" or remove them"))
        return findings

    kimi = bool(KIMI_K25_MODEL.search(config.launch.model_path))
    if config.launch.speculative_draft_model_path is None and algorithm != "NGRAM":
        if kimi:
            findings.append(Finding("error", host, "speculative_draft_model_path",
                                    f"KimiK25 has no built-in draft layers, so {algorithm} needs a draft model; "
                                    f"set speculative_draft_model_path to its EAGLE-3 draft"))
        elif algorithm in ("EAGLE3", "STANDALONE"):
            findings.append(Finding("warning", host, "speculative_draft_model_path",
                                    f"{algorithm} without a draft model works only for models with their own "
                                    f"MTP layers (DeepSeek-style); set speculative_draft_model_path otherwise"))
    return findings


def _architecture_findings(host: str, config, compute_caps: list[str] | None, version: str,
                           source: str, patch_sets: tuple[str, ...] = ()) -> list[Finding]:
    findings = []
    if compute_caps is None:
        if not config.gpu_less and (config.launch.enable_torch_symm_mem or config.launch.enable_flashinfer_allreduce_fusion):
            findings.append(Finding("warning", host, "gpu_compute_cap", "unknown, so SM-specific rules were not "
                                    "checked; set gpu_compute_cap (e.g. \"12.0\") for this host"))
        return findings
    # A group's tp_size spans its hosts: each runs its share (sglfleet.plan.multinode).
    own, hosts = gpus_per_host(config.launch), config.launch.nnodes
    if compute_caps and own > len(compute_caps):
        over = f" over {hosts} hosts ({own} each)" if hosts > 1 else ""
        findings.append(Finding("error", host, "tp_size", f"= {config.launch.tp_size}{over}, but the host has "
                                f"{len(compute_caps)} GPUs ({source}); set tp_size <= {len(compute_caps) * hosts}"))
    if 12 not in _majors(compute_caps):
        return findings
    if config.launch.enable_torch_symm_mem:
        if Version(version) < SYMM_MEM_SM120_FIXED and SYMM_MEM_BACKPORT not in patch_sets:
            findings.append(Finding("error", host, "enable_torch_symm_mem",
                                    f"sglang {version} on SM120 ({source}) fails at start-up: its torch symmetric-memory "
                                    f"all-reduce sizes cover only SM90 and SM100, and the lookup raises KeyError 12 "
                                    f"(fixed in {SYMM_MEM_SM120_FIXED}, patch set {SYMM_MEM_BACKPORT} backports it); "
                                    "set enable_torch_symm_mem = False"))
        elif Version(version) < SYMM_MEM_SM120_FIXED:
            findings.append(Finding("warning", host, "enable_torch_symm_mem",
                                    f"sglang {version} with patch set {SYMM_MEM_BACKPORT} has no torch symmetric-memory "
                                    f"all-reduce for SM120 ({source}) and skips it; set enable_torch_symm_mem = False"))
        else:
            findings.append(Finding("warning", host, "enable_torch_symm_mem",
                                    f"sglang {version} has no torch symmetric-memory all-reduce for SM120 ({source}) and "
                                    f"skips it; set enable_torch_symm_mem = False"))
    if config.launch.enable_flashinfer_allreduce_fusion:
        findings.append(Finding("warning", host, "enable_flashinfer_allreduce_fusion",
                                f"ignored on SM120 ({source}): sglang applies FlashInfer all-reduce fusion only on SM90 and "
                                "SM100; set enable_flashinfer_allreduce_fusion = False"))
    return findings


def _fleet_findings(host: str, config) -> list[Finding]:
    findings = []
    if config.server == "sglang" and config.gpu_less:
        findings.append(Finding("error", host, "server", "SGLang needs GPUs and this host is gpu_less; "
                                "set server = \"standin\" (local fleet only) or gpu_less = False"))
    if config.server == "standin" and not config.gpu_less:
        findings.append(Finding("warning", host, "server", "the stand-in serves no model; use it only on "
                                "GPU-less local-fleet hosts (set gpu_less = True there)"))
    if config.gate_bake_s > 0 and not config.launch.enable_metrics:
        findings.append(Finding("error", host, "gate_bake_s", "the bake reads sglang's /metrics; "
                                "set enable_metrics = True or gate_bake_s = 0"))
    if config.gate_bake_s > 0 and not config.router_url:
        findings.append(Finding("warning", host, "gate_bake_s", "no router_url: the bake judges whatever "
                                "traffic reaches the host, and without any it is inconclusive "
                                f"(gate_on_inconclusive = {config.gate_on_inconclusive!r})"))
    if config.launch.disaggregation_mode and config.gate_bake_s > 0 and config.gate_on_inconclusive == "fail":
        # sglfleet.plan.pd_units: the first batch waits out of the gateways for the flip, so bakes on no traffic.
        findings.append(Finding("warning", host, "gate_bake_s", "a PD fleet's first batch bakes out of the gateways "
                                "(held for the flip), on no traffic, so inconclusive: set gate_on_inconclusive = "
                                "\"pass\" or gate_bake_s = 0"))
    if config.gate_min_spec_accept_length is not None:
        if config.launch.speculative_algorithm is None:
            findings.append(Finding("error", host, "gate_min_spec_accept_length", "no speculative decoding "
                                    "to measure; set speculative_algorithm or remove the threshold"))
    if config.router_url and config.launch.listen_host in ("127.0.0.1", "localhost", "::1"):
        findings.append(Finding("warning", host, "listen_host", f"= {config.launch.listen_host} with router_url set: "
                                "a router on another machine cannot reach it; set listen_host = \"0.0.0.0\" or "
                                "the host's address"))
    return findings


def lint(host_name: str, config, flagset, compute_caps: list[str] | None, sglang_version: str,
         caps_source: str = "declared", patch_sets: tuple[str, ...] = ()) -> list[Finding]:
    """
    Check one host's launch configuration; errors first, then warnings.

    + host_name: the inventory name, used in every finding
    + config: the host's ``HostConfig``
    + flagset: the stack's ``sglfleet.shipped.server_flags.FlagSet``, or None to skip flag checks
    + compute_caps: the compute capability of each GPU (``["12.0"] * 8``), or None when unknown
    + sglang_version: the stack's sglang version, e.g. ``"0.5.9"``
    + caps_source: where ``compute_caps`` come from, named in the findings that depend on them
    + patch_sets: the names of the patch sets the host's stack gets (a backport relaxes a rule)

    **Example:**

    .. code:: python

        errors = [f for f in lint(name, config, flags, None, "0.5.9") if f.severity == "error"]
    """
    findings = []
    if flagset is not None:
        findings += _flag_findings(host_name, config, flagset, sglang_version)
    findings += _speculative_findings(host_name, config)
    findings += _architecture_findings(host_name, config, compute_caps, sglang_version, caps_source, patch_sets)
    findings += _fleet_findings(host_name, config)
    return sorted(findings, key=lambda finding: finding.severity != "error")


def model_findings(name: str, config, manifests_dir: Path | None = None) -> list:
    """
    What stops the host's models from being staged as pinned, as lint findings.

    + name: the host's inventory name
    + config: its ``HostConfig``
    + manifests_dir: where manifests live

    A hub id needs a revision that is a commit and its manifest; a branch, a
    tag or no revision is an error unless ``allow_unpinned_models`` (then the
    server fetches the model itself at start, as sglang does by default).
    """
    findings = []
    for role, path_key, revision_key in ROLES:
        repo, revision = getattr(config.launch, path_key), getattr(config, revision_key)
        if not repo or not is_hub_id(repo):
            if revision:
                findings.append(Finding("warning", name, revision_key, f"{path_key} = {repo!r} is not a hub id, "
                                        f"so the revision is not used; remove {revision_key}"))
            continue
        if revision is None or not PINNED.match(revision):
            what = "no revision" if revision is None else f"{revision!r} is a branch or tag, not a commit"
            if not config.allow_unpinned_models:  # allowed: the server fetches it at start, as sglang does
                findings.append(Finding("error", name, revision_key, f"{repo}: {what}; pin the 40-hex commit "
                                        f"(`{lock_command(repo, revision or 'main', config.hf_endpoint)}` prints it) "
                                        f"or set allow_unpinned_models = True (development only)"))
            continue
        try:
            load_manifest(repo, revision, manifests_dir, config.hf_endpoint)
        except ModelError as error:
            findings.append(Finding("error", name, revision_key, str(error)))
    if config.model_source == "controller" and staged_models(config) and not config.models_controller_dir:
        findings.append(Finding("error", name, "models_controller_dir", "model_source = \"controller\" needs the "
                                "controller's folder of <org>/<name>/<revision>/ copies; set models_controller_dir"))
    return findings
