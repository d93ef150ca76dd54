"""Known advisories of the sglang releases the stacks serve, and which of them are open on a host.

``files/advisories.toml`` declares each advisory: what is exposed, the releases read and those
affected, the first that fixes it, the patch sets or the setting that close it, and the file and
line read in each release (``docs/advisories.md``). The declaration is data, checked when it is
read: a key that is missing or unknown, a version affected but never read, a release read with no
line cited, or a patch set no shipped set is named, is one line naming the advisory.

Pure: the verdict on one host is a function of its sglang version, the patch sets it applies and
the flags it launches with. An advisory is **open** on a host when its release is affected, no
closing patch set covers it there, and its launch reaches the exposed code; a release nobody read
for it is reported too, so that an upgrade is never quietly taken as safe.

**Example:**

.. code:: python

    for advisory in load_advisories():
        found = verdict(advisory, "0.5.9", sets_naming, applied={"server_info_keys_redacted"}, flags=[])
        if found.is_open:
            print(advisory.id, found.why)
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sglfleet import FILES

ADVISORIES = FILES / "advisories.toml"
KEYS = {"id", "exposed", "read", "affected", "fixed", "closes", "patch_sets", "reached_with", "not_reached",
        "references", "source"}
REQUIRED = KEYS - {"reached_with"}
# A verdict's status: the first two are open (the lint says so), the others are not.
OPEN, NOT_READ = "open", "not read"
NOT_AFFECTED, CLOSED_BY_SETS, NOT_REACHED = "not affected", "closed by patch sets", "not reached"


class AdvisoryError(ValueError):
    """``files/advisories.toml`` does not hold what it must; one line naming the advisory."""


@dataclass(frozen=True)
class Advisory:
    """One declared advisory (see the module's docstring and ``files/advisories.toml``)."""

    id: str
    exposed: str                     # what is exposed, to whom
    read: tuple[str, ...]            # every release read for it
    affected: tuple[str, ...]        # those that have it
    fixed: str                       # the first release without it, or ""
    closes: str                      # what closes it, in words
    patch_sets: tuple[str, ...]      # sets that close it where they name the release
    reached_with: tuple[str, ...]    # flags a launch needs to reach it; () when any launch does
    not_reached: str                 # why no launch of sglfleet's reaches it, or ""
    references: tuple[str, ...]
    source: dict[str, str] = field(compare=False)  # release -> the file and line read


@dataclass(frozen=True)
class Verdict:
    """An advisory on one host: its status and, for an open one, what the host could do."""

    status: str
    why: str = ""

    @property
    def is_open(self) -> bool:
        return self.status in (OPEN, NOT_READ)


def load_advisories(path: Path | str = ADVISORIES, set_names: set[str] | None = None) -> list[Advisory]:
    """
    The declared advisories, in the file's order; ``AdvisoryError`` when the file is wrong.

    + path: the TOML file (``files/advisories.toml``)
    + set_names: the patch sets there are; a ``patch_sets`` entry outside them is refused (None: not checked)

    **Example:**

    .. code:: python

        ids = [a.id for a in load_advisories()]
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise AdvisoryError(f"advisories {path}: does not parse: {error}") from None
    if set(data) != {"advisory"} or not isinstance(data["advisory"], list):
        raise AdvisoryError(f"advisories {path}: holds [[advisory]] tables and nothing else")
    advisories = [_build(path, i, entry, set_names) for i, entry in enumerate(data["advisory"], start=1)]
    seen = [a.id for a in advisories]
    if len(set(seen)) != len(seen):
        raise AdvisoryError(f"advisories {path}: id {next(i for i in seen if seen.count(i) > 1)} is declared twice")
    return advisories


def _build(path: Path, index: int, entry, set_names) -> Advisory:
    name = entry.get("id") if isinstance(entry, dict) and isinstance(entry.get("id"), str) else f"#{index}"

    def refuse(problem: str):
        raise AdvisoryError(f"advisory {name} in {path}: {problem}")

    if not isinstance(entry, dict):
        refuse("is not a table")
    if unknown := sorted(set(entry) - KEYS):
        refuse(f"unknown key {unknown[0]} (keys: {', '.join(sorted(KEYS))})")
    if missing := sorted(REQUIRED - set(entry)):
        refuse(f"lacks {missing[0]}")
    for key in ("id", "exposed", "closes"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            refuse(f"`{key}` must be a non-empty string")
    for key in ("fixed", "not_reached"):
        if not isinstance(entry[key], str):
            refuse(f"`{key}` must be a string (\"\" for none)")
    lists = {}
    for key in ("read", "affected", "patch_sets", "reached_with", "references"):
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            refuse(f"`{key}` must be a list of strings")
        lists[key] = tuple(value)
    if not lists["read"]:
        refuse("`read` must list the releases read for it")
    if outside := [v for v in lists["affected"] if v not in lists["read"]]:
        refuse(f"affected release {outside[0]} is not in `read`: read it first")
    if entry["fixed"] in lists["affected"]:
        refuse(f"release {entry['fixed']} is both affected and `fixed`")
    source = entry["source"]
    if not isinstance(source, dict) or not all(isinstance(v, str) and v for v in source.values()):
        refuse("`source` must map each release read to the file and line read")
    if uncited := [v for v in lists["read"] if v not in source]:
        refuse(f"release {uncited[0]} is read but `source` cites no line of it")
    if set_names is not None and (unknown := [s for s in lists["patch_sets"] if s not in set_names]):
        refuse(f"patch set {unknown[0]} is not a shipped set (files/patches/)")
    if not all(flag.startswith("--") for flag in lists["reached_with"]):
        refuse("`reached_with` lists sglang flags, e.g. \"--enable-lora\"")
    return Advisory(entry["id"], " ".join(entry["exposed"].split()), lists["read"], lists["affected"],
                    entry["fixed"], " ".join(entry["closes"].split()), lists["patch_sets"], lists["reached_with"],
                    " ".join(entry["not_reached"].split()), lists["references"], dict(source))


def verdict(advisory: Advisory, version: str, naming: set[str], applied: set[str], flags) -> Verdict:
    """
    The advisory on one host.

    + advisory: from ``load_advisories``
    + version: the host's sglang release
    + naming: the advisory's patch sets that name ``version`` (``PatchSet.versions``)
    + applied: the patch sets the host applies to ``version`` (less ``patch_sets_skip``)
    + flags: the host's launch flags (``extra_flags`` and the rendered keys), as argv

    **Example:**

    .. code:: python

        verdict(lora, "0.5.9", set(), set(), ["--enable-lora"]).status   # "open"
    """
    if version not in advisory.read:
        return Verdict(NOT_READ, f"sglang {version} was not read for it; read it and declare it "
                                 f"(files/advisories.toml, docs/advisories.md)")
    if version not in advisory.affected:
        return Verdict(NOT_AFFECTED)
    if naming and naming <= applied:
        return Verdict(CLOSED_BY_SETS, ", ".join(sorted(naming)))
    if advisory.not_reached:
        return Verdict(NOT_REACHED, advisory.not_reached)
    if advisory.reached_with and not _has_flag(flags, advisory.reached_with):
        return Verdict(NOT_REACHED, f"the launch has none of {', '.join(advisory.reached_with)}")
    skipped = sorted(naming - applied)
    if skipped:
        how = f"this host skips {', '.join(skipped)} (patch_sets_skip)"
    elif advisory.reached_with:
        how = f"this host launches with {' or '.join(f for f in advisory.reached_with if _has_flag(flags, (f,)))}"
    else:
        how = f"no patch set covers sglang {version}"
    fixed = f"fixed in sglang {advisory.fixed}" if advisory.fixed else "no sglang release fixes it yet"
    return Verdict(OPEN, f"{how}; closed by {advisory.closes}; {fixed}")


def _has_flag(argv, flags) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv for flag in flags)


def message(advisory: Advisory, version: str, found: Verdict) -> str:
    """An open verdict as the lint's one line (after ``host: warning: advisory: ``)."""
    if found.status == NOT_READ:
        return f"{advisory.id}: {found.why}"
    return f"{advisory.id}: sglang {version}: {advisory.exposed}; {found.why}"


def closed_lines(accounting) -> list[str]:
    """
    The advisories a host's release has that are not open there, and why, one line for each
    advisory, release and reason, with its hosts: what ``sglfleet lint`` reports beside the open ones.

    + accounting: ``(host, version, Advisory, Verdict)`` entries (``check_inventory(..., accounting=)``)

    **Example:**

    .. code:: python

        closed_lines(entries)   # ["advisory sglang-server-info-keys (sglang 0.5.9): closed by patch sets ..."]
    """
    hosts_of: dict[tuple, list[str]] = {}
    for host, version, advisory, found in accounting:
        if found.status in (CLOSED_BY_SETS, NOT_REACHED):
            hosts_of.setdefault((advisory.id, version, found.status, found.why), []).append(host)
    return [f"advisory {id_} (sglang {version}): {status}: {why} ({', '.join(dict.fromkeys(hosts))})"
            for (id_, version, status, why), hosts in hosts_of.items()]
