"""Resolve a stack definition into its PEP 751 lock with uv.

Resolution runs ``uv pip compile --format pylock.toml`` on a generated
pyproject.toml, so each package comes from the source its definition names
(``[tool.uv.sources]`` with explicit indexes, or a direct wheel URL), with the
definition's overrides, for each of the stack's Pythons on its platform: one
resolution per interpreter (``--python-version``), as a host of that Python
would resolve. uv lists every compatible wheel of a release; the lock keeps the
one a host of that Python installs (best tag for the stack's platform) and no
sdists: hosts never build. A wheel every Python takes is one entry; one only
some take carries a ``marker`` naming them (``python_version == '3.13'``).

Sources this machine cannot reach are left out of the resolution and recorded
under ``[[tool.sglfleet.unresolved]]``; the deploy refuses such a lock until
``sglfleet lock`` is run again where they can be reached.

**Example:**

.. code:: python

    text, unresolved = resolve("dev")
    path = write_lock("dev", text)   # files/stacks/locks/dev/pylock.toml
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import parse_wheel_filename

from sglfleet.artifacts.stacks import StackError, definition_pythons, lock_path, read_definition

PYPI = "https://pypi.org/simple"


def uv_binary() -> str:
    """The controller's uv (a dependency of sglfleet, installed beside this python)."""
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else (shutil.which("uv") or "uv")


def reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether the host of ``url`` answers HTTP at all (any status counts)."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def target_tags(python: str, platform: str) -> list:
    """Wheel tags a CPython ``python`` on ``platform`` (``x86_64-manylinux_2_36``) accepts, best first."""
    arch, _, libc = platform.partition("-")
    glibc = 17 if libc == "manylinux2014" else int(libc.rsplit("_", 1)[-1])
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms = []
    for minor in range(glibc, 4, -1):
        platforms.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_{arch}")
    version = tuple(int(part) for part in python.split("."))
    interpreter = f"cp{version[0]}{version[1]}"
    return [*cpython_tags(version, platforms=platforms), *compatible_tags(version, interpreter, platforms)]


def best_wheel(package: dict, tags: list) -> dict | None:
    """The wheel of a uv pylock package entry a host on ``tags`` installs, or None."""
    rank = {tag: i for i, tag in enumerate(tags)}
    candidates = list(package.get("wheels") or [])
    archive = package.get("archive")
    if archive and archive.get("url", "").endswith(".whl"):
        candidates.append(archive)
    best, best_rank = None, len(rank)
    for wheel in candidates:
        filename = urllib.parse.unquote(wheel.get("name") or wheel["url"].rsplit("/", 1)[-1])
        wheel_rank = min((rank.get(tag, len(rank)) for tag in parse_wheel_filename(filename)[3]))
        if wheel_rank < best_rank:
            best, best_rank = {**wheel, "name": filename}, wheel_rank
    return best


def content_length(url: str) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as response:
            return int(response.headers["Content-Length"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def requirement(package: dict) -> str:
    if "url" in package:
        return f"{package['name']} @ {package['url']}"
    version = str(package["version"])
    return f"{package['name']}{version if version[0] in '<>=!~' else '==' + version}"


def compile_lock(packages: list[dict], definition: dict, workdir: Path, no_deps: bool,
                 excludes: list[str], python: str) -> list[dict]:
    """Run uv pip compile for ``packages`` on ``python``; return uv's pylock package entries."""
    workdir.mkdir(parents=True)
    lines = [
        "[project]", 'name = "sglfleet-stack"', 'version = "0"',
        f'requires-python = "=={python}.*"',
        f"dependencies = {json.dumps([requirement(p) for p in packages])}",
        "[tool.uv.sources]",
    ]
    lines += [f'{p["name"]} = {{ index = "{p["index"]}" }}' for p in packages if "index" in p]
    for name, url in definition.get("indexes", {}).items():
        lines += ["[[tool.uv.index]]", f'name = "{name}"', f'url = "{url}"', "explicit = true"]
    (workdir / "pyproject.toml").write_text("\n".join(lines) + "\n")
    overrides = [f"{name}{spec}" for name, spec in definition.get("overrides", {}).items()]
    (workdir / "overrides.txt").write_text("\n".join(overrides) + "\n")
    (workdir / "excludes.txt").write_text("\n".join(excludes) + "\n")
    command = [
        uv_binary(), "pip", "compile", "pyproject.toml", "--quiet", "--no-header",
        "--format", "pylock.toml", "--output-file", "pylock.toml",
        "--default-index", PYPI,
        "--python-version", python, "--python-platform", definition["platform"],
        "--overrides", "overrides.txt", "--excludes", "excludes.txt",
    ]
    if no_deps:
        command.append("--no-deps")
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise StackError(f"uv could not resolve the stack for python {python}: {done.stderr.strip()}")
    return tomllib.loads((workdir / "pylock.toml").read_text())["packages"]


def toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value))


def python_marker(pythons: list[str], every: list[str]) -> str | None:
    """The PEP 508 marker of an entry for ``pythons`` in a stack of ``every``; None when it is all."""
    if list(pythons) == list(every):
        return None
    return " or ".join(f"python_version == '{python}'" for python in pythons)


def requires_python(pythons: list[str]) -> str:
    """``==3.11.*`` for one Python, ``>=3.11, <3.14`` for several (a stack's are consecutive)."""
    if len(pythons) == 1:
        return f"=={pythons[0]}.*"
    newest = max(pythons, key=lambda p: tuple(map(int, p.split("."))))
    oldest = min(pythons, key=lambda p: tuple(map(int, p.split("."))))
    major, minor = newest.split(".")
    return f">={oldest}, <{major}.{int(minor) + 1}"


def merge(per_python: dict[str, list[dict]]) -> list[dict]:
    """
    One entry per distinct locked wheel, with the Pythons it is for, from each
    interpreter's resolution (``{python: [package]}``), in name, then Python, order.

    **Example:**

    .. code:: python

        merge({"3.11": [orjson_cp311, idna], "3.13": [orjson_cp313, idna]})
        # [idna (3.11, 3.13), orjson cp311 (3.11), orjson cp313 (3.13)]
    """
    merged: dict[tuple, dict] = {}
    for python, packages in per_python.items():
        for package in packages:
            key = (package["name"], package["version"], package["wheel"]["name"])
            merged.setdefault(key, {**package, "pythons": []})["pythons"].append(python)
    order = list(per_python)
    return sorted(merged.values(), key=lambda p: (p["name"], order.index(p["pythons"][0])))


def render_lock(name: str, definition: dict, raw_definition: bytes, packages: list[dict],
                unresolved: list[dict]) -> str:
    """The lock's text: pylock.toml with one wheel per package and Python, and a [tool.sglfleet] table."""
    pythons = definition_pythons(definition)
    out = [
        f"# Lock of stack {name}, written by `sglfleet lock {name}` from files/stacks/{name}.toml.",
        "# PEP 751; one wheel per package and Python (the one hosts of that Python install);",
        "# a marker names the Pythons of a wheel not all of them take. Do not edit: re-lock.",
        'lock-version = "1.0"',
        'created-by = "sglfleet"',
        f"requires-python = {toml_value(requires_python(pythons))}",
        "",
    ]
    for package in packages:
        out += ["[[packages]]", f"name = {toml_value(package['name'])}",
                f"version = {toml_value(package['version'])}"]
        marker = python_marker(package.get("pythons", pythons), pythons)
        if marker:
            out.append(f"marker = {toml_value(marker)}")
        if package.get("index"):
            out.append(f"index = {toml_value(package['index'])}")
        out += [f"wheels = [{toml_value(package['wheel'])}]", ""]
    tool = {
        "definition-sha256": hashlib.sha256(raw_definition).hexdigest(),
        "pythons": pythons,
        "platform": definition["platform"],
        "overrides": [f"{k}{v}" for k, v in definition.get("overrides", {}).items()],
        "no-deps": [p["name"] for p in definition.get("package", []) if p.get("deps") is False],
        "bootstrap": ["uv"],
    }
    out.append("[tool.sglfleet]")
    out += [f"{key} = {toml_value(value)}" for key, value in tool.items()]
    for entry in unresolved:
        out += ["", "[[tool.sglfleet.unresolved]]"]
        out += [f"{key} = {toml_value(value)}" for key, value in entry.items()]
    return "\n".join(out) + "\n"


def resolve(name: str, stacks_dir: Path | None = None, check_reachable=reachable) -> tuple[str, list[dict]]:
    """
    Resolve stack ``name`` into its lock text; also return the unresolved entries.

    + name: the stack's name (files/stacks/<name>.toml)
    + check_reachable: ``url -> bool``, whether a non-PyPI source can be reached
    """
    definition, raw = read_definition(name, stacks_dir)
    declared = definition.get("package", [])
    indexes = definition.get("indexes", {})
    source = {p["name"]: p.get("url") or indexes.get(p.get("index"), PYPI) for p in declared}
    down = {url for url in set(source.values()) - {PYPI} if not check_reachable(url)}
    unresolved = [
        {"name": p["name"], "version": str(p["version"]), "source": urllib.parse.urlsplit(source[p["name"]]).netloc,
         "reason": f"{source[p['name']]} unreachable when locked; its dependencies are missing too"}
        for p in declared if source[p["name"]] in down
    ]
    skip = [u["name"] for u in unresolved]
    per_python = {python: resolve_python(name, definition, declared, skip, python)
                  for python in definition_pythons(definition)}
    return render_lock(name, definition, raw, merge(per_python), unresolved), unresolved


def resolve_python(name: str, definition: dict, declared: list[dict], skip: list[str], python: str) -> list[dict]:
    """The packages a host of ``python`` installs, each with the one wheel it takes."""
    tags = target_tags(python, definition["platform"])
    entries = []
    with tempfile.TemporaryDirectory(prefix="sglfleet-lock-") as tmp:
        with_deps = [p for p in declared if p.get("deps", True) and p["name"] not in skip]
        alone = [p for p in declared if not p.get("deps", True) and p["name"] not in skip]
        alone.append({"name": "uv", "version": definition["uv"]})
        if with_deps:
            entries += compile_lock(with_deps, definition, Path(tmp, "deps"), False, skip, python)
        entries += compile_lock(alone, definition, Path(tmp, "alone"), True, skip, python)
    packages, seen = [], set()
    for entry in entries:
        if entry["name"] in seen:
            continue
        seen.add(entry["name"])
        wheel = best_wheel(entry, tags)
        if wheel is None:
            raise StackError(
                f"stack {name}: {entry['name']} {entry['version']} has no wheel for python "
                f"{python} on {definition['platform']}: pin a version that has one, or drop "
                f"{python} from the stack's pythons"
            )
        size = wheel.get("size") or content_length(wheel["url"])
        locked = {"name": wheel["name"], "url": wheel["url"]}
        if size:
            locked["size"] = size
        locked["hashes"] = {"sha256": wheel.get("hashes", {}).get("sha256", "")}
        packages.append({"name": entry["name"], "version": entry["version"],
                         "index": entry.get("index"), "wheel": locked})
    return packages


def write_lock(name: str, text: str, stacks_dir: Path | None = None) -> Path:
    """
    Write ``text`` as stack ``name``'s lock, atomically; return its path.

    + name: the stack's name
    + text: the lock, as ``resolve`` renders it

    **Example:**

    .. code:: python

        write_lock("dev", resolve("dev")[0])   # files/stacks/locks/dev/pylock.toml
    """
    path = lock_path(name, stacks_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".toml.part")
    partial.write_text(text)
    partial.replace(path)
    return path
