"""
Pinned models on this host: check, stage, verify and collect revisions in the model store.

A revision lives in ``<store>/<org>/<name>/<revision>/`` with a marker,
``.sglfleet-verified.json``, that holds the digest of the manifest it was
verified against and a snapshot of every file's size and mtime. ``check``
compares the snapshot with the files (one ``stat`` each: milliseconds for a
600 GB model); ``stage`` does the rest:

- it works in ``.<revision>.partial/`` beside the final folder, under a lock
  per revision; the partial folder's own record lists the files already
  verified, so a killed staging resumes file by file without hashing them again;
- it fetches what is missing: first from peer hosts that staged the revision
  earlier in this run (``--peer``, with aria2c: several sources a file, LFS
  files checked by sha256 on arrival), then what they did not give from the Hub
  or a mirror with the stack's huggingface_hub (``hub_fetch.py``, run by the
  stack's python with ``HF_TOKEN`` read from the root-only env file, in its
  environment only), or it finds the files the controller uploaded there (with
  peers, what they did not give is listed on a ``sglfleet-needs`` line, exit 3,
  for the controller to send);
- it checks every file against the manifest (sha256 for LFS files, the git
  blob sha1 for the rest: neither huggingface_hub nor a mirror checks content);
  a file that fails is removed and fetched once more, then the host fails;
- it renames the folder into place only when every file passed. A staged
  revision that drifted (a file whose size or mtime changed) is repaired in
  place: each changed file is checked, and fetched again when it fails.

Standard library only (python3.9+), run as root by the host tool.

**Example:**

.. code:: shell

    sglfleet-release models check '[{"dir": "/opt/sglfleet/models/org/m/4d01...", "digest": "9f2c..."}]'
    sglfleet-release models stage --dir /opt/sglfleet/models/org/m/4d01... --source hub \\
        --python /opt/sglfleet/stacks/dev-5867/venv/bin/python < manifest.json
    sglfleet-release models collect --keep /opt/sglfleet/models/org/m/4d01...
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

from .aria2 import aria2_command, aria2_input
from .layout import LAYOUT, STALE_MINUTES, Layout, on_host

MARKER = ".sglfleet-verified.json"
CHUNK = 8 << 20
PINNED = re.compile(r"^[0-9a-f]{40}$")
MODEL_FLAGS = ("--model-path", "--speculative-draft-model-path")
HUB_FETCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hub_fetch.py")


NEEDS = "sglfleet-needs"
NEEDS_EXIT = 3


class StageFailed(Exception):
    """Staging stopped; the message names the model, the file and the fix."""


class NeedsUpload(Exception):
    """Source "controller" with peers: these files came from no peer; the controller sends them."""

    def __init__(self, paths: list):
        super().__init__(f"{len(paths)} files for the controller to send")
        self.paths = paths


def partial_of(final: str) -> str:
    parent, revision = os.path.split(final.rstrip("/"))
    return os.path.join(parent, f".{revision}.partial")


def lock_of(final: str) -> str:
    parent, revision = os.path.split(final.rstrip("/"))
    return os.path.join(parent, f".{revision}.lock")


def digest_of(path: str, entry: dict) -> tuple[str, str]:
    """(the digest the manifest gives for ``entry``, the file's own), sha256 or git blob sha1."""
    if entry.get("sha256"):
        want, digest = entry["sha256"], hashlib.sha256()
    else:
        want, digest = entry["git_sha1"], hashlib.sha1()
        digest.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
    return want, digest.hexdigest()


def stat_of(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def read_json(path: str, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def write_json(path: str, data) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        json.dump(data, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def changed_files(folder: str, record: dict) -> list[str]:
    """Files of ``record`` whose size or mtime is not what was verified (or that are gone)."""
    return sorted(path for path, seen in (record.get("files") or {}).items()
                  if stat_of(os.path.join(folder, path)) != seen)


def readable(folder: str) -> None:
    """Folders 0755 and files 0644: the service's user reads what root staged, whatever root's umask."""
    os.chmod(folder, 0o755)
    for root, dirs, names in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in names:
            os.chmod(os.path.join(root, name), 0o644)


def free_bytes(path: str) -> int:
    """Bytes free for root on the filesystem that holds (or will hold) ``path``."""
    while not os.path.isdir(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def unchecked_bytes(folder: str, verified: set) -> int:
    """Bytes under a partial ``folder`` that no check passed: the staging replaces them, so they count as free."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            full = os.path.join(root, name)
            if os.path.relpath(full, folder) not in verified and name != MARKER:
                try:
                    total += os.lstat(full).st_blocks * 512
                except OSError:
                    pass
    return total


def check(spec: list) -> list:
    """
    The state of each wanted revision, from its marker and one stat per file.

    + spec: ``[{"dir": final folder, "digest": manifest digest}]``

    Each answer: ``state`` ok, drifted (``changed`` lists the files), partial
    or absent (``verified`` lists what a killed staging already checked),
    ``present`` bytes verified there, ``free`` bytes on its filesystem, and for
    a partial folder ``unchecked`` bytes it holds that the staging will replace.
    """
    answers = []
    for want in spec:
        final = want["dir"]
        answer = {"dir": final, "free": free_bytes(final)}
        marker = read_json(os.path.join(final, MARKER)) if os.path.isdir(final) else None
        if marker is not None and marker.get("manifest") == want["digest"]:
            changed = changed_files(final, marker)
            answer.update(state="drifted" if changed else "ok", changed=changed,
                          present=sum(size for path, (size, _) in marker["files"].items() if path not in changed))
        elif os.path.isdir(final):
            answer.update(state="drifted", changed=None, present=0)  # no marker for this manifest: check all
        else:
            record = read_json(os.path.join(partial_of(final), MARKER), {}) or {}
            ok = {} if record.get("manifest") != want["digest"] else record.get("files") or {}
            verified = sorted(set(ok) - set(changed_files(partial_of(final), {"files": ok})))
            answer.update(state="partial" if verified else "absent", verified=verified,
                          present=sum(ok[path][0] for path in verified),
                          unchecked=unchecked_bytes(partial_of(final), set(verified)))
        answers.append(answer)
    return answers


def hub_environment(env_file: str, endpoint: str | None) -> dict:
    """The fetch's environment: HF_TOKEN from the root-only env file (never argv), the mirror if any."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    try:
        with open(env_file) as handle:
            for line in handle:
                name, sep, value = line.strip().partition("=")
                if sep and name == "HF_TOKEN":
                    env["HF_TOKEN"] = value
    except OSError:
        pass
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    if endpoint:
        # A mirror sends no Xet headers; plain HTTP is the path it serves (olah, a static store).
        env.update(HF_ENDPOINT=endpoint, HF_HUB_DISABLE_XET="1")
    return env


def fetch_from_hub(python: str, repo: str, revision: str, folder: str, paths: list, env: dict) -> None:
    """Download ``paths`` into ``folder`` with the stack's huggingface_hub; raise StageFailed with its last line."""
    # huggingface_hub never reuses another run's .incomplete files; they only take space.
    downloads = os.path.join(folder, ".cache", "huggingface", "download")
    for root, _, names in os.walk(downloads):
        for name in names:
            if name.endswith(".incomplete"):
                os.unlink(os.path.join(root, name))
    done = subprocess.run([python, HUB_FETCH, repo, revision, folder], input="\n".join(paths),
                          env={**env, "HF_HOME": os.path.join(folder, ".cache", "hf-home")},
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise StageFailed(lines[-1] if lines else f"hub_fetch exited {done.returncode}")


def forget_download(folder: str, path: str) -> None:
    """Remove a file and huggingface_hub's record of it, so the next fetch downloads it again."""
    for name in (os.path.join(folder, path),
                 os.path.join(folder, ".cache", "huggingface", "download", path + ".metadata")):
        if os.path.lexists(name):
            os.unlink(name)


class Stager:
    """One staging of one revision: what to fetch, from where, and the record of what passed."""

    def __init__(self, manifest: dict, final: str, source: str, python: str | None, endpoint: str | None,
                 env_file: str, digest: str, peers: tuple = ()):
        self.manifest, self.final, self.source = manifest, final, source
        self.python, self.endpoint, self.env_file, self.digest = python, endpoint, env_file, digest
        self.peers = tuple(peers)  # base URLs of this revision on hosts that staged it
        self.entries = {entry["path"]: entry for entry in manifest["files"]}
        self.name = f"{manifest['repo']}@{manifest['revision'][:12]}"
        self.partial = partial_of(final)
        self.fetched = 0
        self.reused = 0  # files a killed run fetched but had not checked: checked now, not fetched again
        self.from_peers = set()  # files that arrived from peers and are not checked yet
        self.peer_bytes = 0  # bytes from peers that passed their check
        self.refused = 0  # files peers did not give, or gave wrong

    def where(self, path: str | None = None) -> str:
        if path in self.from_peers:
            return "a peer host"
        return {"hub": self.endpoint or "the Hub", "controller": "the controller"}[self.source]

    def passes(self, folder: str, path: str) -> bool:
        want, found = digest_of(os.path.join(folder, path), self.entries[path])
        if want == found:
            return True
        sys.stderr.write(f"{self.name}: {path} from {self.where(path)} has digest {found[:16]}..., the manifest "
                         f"says {want[:16]}...: removed\n")
        return False

    def fetch_from_peers(self, paths: list) -> None:
        """Fetch ``paths`` from the peers into the partial folder with aria2c; what fails is left to the source."""
        if not shutil.which("aria2c"):
            sys.stderr.write(f"{self.name}: aria2c is missing, so the files come from {self.where()}: "
                             f"apt install aria2 to fetch them from peer hosts\n")
            return
        # Under .cache, which goes before the rename: a part left by a failed fetch never lands in the revision.
        folder = os.path.join(self.partial, ".cache", "peers")
        os.makedirs(folder, exist_ok=True)
        input_file = os.path.join(folder, "aria2.input")
        with open(input_file, "w") as handle:
            handle.write(aria2_input([(p, self.entries[p].get("sha256")) for p in paths], self.peers))
        # Its exit status says little (one refused file fails it): each file's own check decides.
        subprocess.run(shlex.split(aria2_command(input_file, folder)), stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for path in paths:
            part = os.path.join(folder, f"{path}.part")
            if os.path.isfile(part) and not os.path.exists(f"{part}.aria2"):  # a control file: unfinished
                os.makedirs(os.path.dirname(os.path.join(self.partial, path)), exist_ok=True)
                os.replace(part, os.path.join(self.partial, path))
                self.from_peers.add(path)
        self.refused += len(paths) - len(self.from_peers & set(paths))

    def origins(self) -> str:
        """Where this staging's bytes came from, for its one line of output."""
        peers = f"{self.peer_bytes} bytes from {len(self.peers)} peer hosts, " if self.peers else ""
        refused = f"; {self.refused} files came from no peer" if self.refused else ""
        return f"{peers}{self.fetched} bytes fetched from {self.where()}{refused}"

    def fetch(self, paths: list) -> None:
        if not paths:
            return
        if self.source == "controller":
            missing = [p for p in paths if not os.path.isfile(os.path.join(self.partial, p))]
            if missing:
                raise StageFailed(f"{self.name}: {len(missing)} files did not arrive from the controller "
                                  f"({', '.join(missing[:3])}): run the deploy again")
            return
        if not self.python:
            raise StageFailed(f"{self.name}: no python with huggingface_hub to fetch it: give the host a stack")
        fetch_from_hub(self.python, self.manifest["repo"], self.manifest["revision"], self.partial, paths,
                       hub_environment(self.env_file, self.endpoint))
        self.fetched += sum(self.entries[p]["size"] for p in paths)

    def verified(self, paths: list, record: dict, record_path: str) -> list:
        """Check ``paths`` in the partial folder; record each that passes; return those that failed."""
        failed = []
        for path in paths:
            full = os.path.join(self.partial, path)
            if os.path.isfile(full) and os.path.getsize(full) == self.entries[path]["size"] \
                    and self.passes(self.partial, path):
                record["files"][path] = stat_of(full)
                write_json(record_path, record)
                if path in self.from_peers:
                    self.peer_bytes += self.entries[path]["size"]
            else:
                forget_download(self.partial, path)
                failed.append(path)
                if path in self.from_peers:
                    self.refused += 1
            self.from_peers.discard(path)
        return failed

    def fetch_and_verify(self, paths: list, record: dict, record_path: str) -> None:
        """Fetch ``paths`` (from peers first), check them; fetch what failed once more; raise when it fails again."""
        missing = [p for p in paths if not os.path.isfile(os.path.join(self.partial, p))]
        # Peers serve no path with a dot component (share.py): .gitattributes and the like come from the source.
        shared = [p for p in missing if not any(part.startswith(".") for part in p.split("/"))]
        if self.peers and shared:
            self.fetch_from_peers(shared)
        if self.source == "controller":
            failed = self.verified(paths, record, record_path)
            if failed and self.peers:
                raise NeedsUpload(failed)
        else:
            # What is already there (a killed run's last file, a file huggingface_hub
            # finished) is checked first: only what fails is fetched.
            present = [p for p in paths if os.path.isfile(os.path.join(self.partial, p))]
            fetched = self.from_peers & set(present)
            failed = self.verified(present, record, record_path)
            self.reused += len(set(present) - fetched) - len(set(failed) - fetched)
            failed += [p for p in paths if p not in present]
            for attempt in range(2):
                if not failed:
                    break
                self.fetch(failed)
                failed = self.verified(failed, record, record_path)
        if failed:
            raise StageFailed(f"{self.name}: {len(failed)} files from {self.where()} do not match the manifest "
                              f"({', '.join(failed[:3])}): the source serves other bytes than it listed; "
                              f"fix the source or re-lock with `sglfleet model lock`")

    def stage_new(self) -> str:
        record_path = os.path.join(self.partial, MARKER)
        os.makedirs(self.partial, exist_ok=True)
        record = read_json(record_path, {}) or {}
        if record.get("manifest") != self.digest:
            record = {"manifest": self.digest, "repo": self.manifest["repo"],
                      "revision": self.manifest["revision"], "files": {}}
        kept = {p for p, seen in record["files"].items()
                if p in self.entries and stat_of(os.path.join(self.partial, p)) == seen}
        record["files"] = {p: record["files"][p] for p in kept}
        todo = [p for p in self.entries if p not in kept]
        self.fetch_and_verify(todo, record, record_path)
        shutil.rmtree(os.path.join(self.partial, ".cache"), ignore_errors=True)
        readable(self.partial)
        os.rename(self.partial, self.final)
        resumed = len(kept) + self.reused
        return f"{self.name}: staged {len(self.entries)} files in {self.final} ({self.origins()}" + \
            (f"; {resumed} files already there from an interrupted staging, checked and kept)" if resumed else ")")

    def repair(self) -> str:
        marker_path = os.path.join(self.final, MARKER)
        marker = read_json(marker_path, {}) or {}
        if marker.get("manifest") == self.digest:
            suspects = [p for p in changed_files(self.final, marker) if p in self.entries]
        else:
            marker = {"manifest": self.digest, "repo": self.manifest["repo"],
                      "revision": self.manifest["revision"], "files": {}}
            suspects = sorted(self.entries)
        suspects += [p for p in self.entries if p not in marker["files"] and p not in suspects]
        bad = []
        for path in suspects:
            full = os.path.join(self.final, path)
            ok = os.path.isfile(full) and os.path.getsize(full) == self.entries[path]["size"] \
                and self.passes(self.final, path)
            if ok:
                marker["files"][path] = stat_of(full)
            else:
                marker["files"].pop(path, None)
                bad.append(path)
        if bad:
            os.makedirs(self.partial, exist_ok=True)
            record_path = os.path.join(self.partial, MARKER)
            record = {"manifest": self.digest, "files": {}}
            self.fetch_and_verify(bad, record, record_path)
            for path in bad:  # rename(2) over the bad file: a running server keeps its open copy
                os.makedirs(os.path.dirname(os.path.join(self.final, path)), exist_ok=True)
                os.chmod(os.path.join(self.partial, path), 0o644)
                os.replace(os.path.join(self.partial, path), os.path.join(self.final, path))
                marker["files"][path] = stat_of(os.path.join(self.final, path))
            shutil.rmtree(self.partial, ignore_errors=True)
        write_json(marker_path, marker)
        what = f"replaced {len(bad)} files that failed their check, {', '.join(bad[:3])} ({self.origins()})" \
            if bad else f"{len(suspects)} changed files checked, all match"
        return f"{self.name}: repaired {self.final}: {what}"

    def run(self) -> str:
        os.makedirs(os.path.dirname(self.final), exist_ok=True)
        with open(lock_of(self.final), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run staging this revision: wait for it
            if os.path.isdir(self.final):
                return self.repair()
            return self.stage_new()


def model_dirs(args: list) -> list:
    """The model folders a release's sglang arguments load."""
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in MODEL_FLAGS]


def store_of(folder: str) -> str | None:
    """The model store a staged folder (``<store>/<org>/<name>/<40 hex>``) lives in, else None."""
    parts = folder.rstrip("/").split("/")
    return "/".join(parts[:-3]) if len(parts) > 4 and PINNED.match(parts[-1]) else None


def referenced(layout: Layout) -> set:
    """Model folders that any staged release of any of the host's services loads (current and previous among them)."""
    found = set()
    for service in on_host(layout):
        for release in os.listdir(service.releases) if os.path.isdir(service.releases) else []:
            meta = read_json(service.release(release, "release.json"), {}) or {}
            found.update(model_dirs(meta.get("args") or []))
    return found


def revisions(store: str):
    """``(repo, revision, folder)`` of every revision folder in ``store``, staged or not (no dot-entries)."""
    for org in sorted(os.listdir(store)) if os.path.isdir(store) else []:
        for name in sorted(os.listdir(os.path.join(store, org))) if os.path.isdir(os.path.join(store, org)) else []:
            folder = os.path.join(store, org, name)
            for revision in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                if PINNED.match(revision):
                    yield f"{org}/{name}", revision, os.path.join(folder, revision)


def stores(layout: Layout, extra=()) -> list:
    return sorted({layout.models, *extra, *filter(None, (store_of(d) for d in referenced(layout)))})


def collect(keep: list, layout: Layout, extra_stores=(), dry_run: bool = False) -> list:
    """
    Remove revisions no staged release loads and this run does not want, and
    partial folders of those revisions over an hour old; return what went.

    + keep: the folders this run stages (its partial folders stay: they resume)
    + dry_run: say what would go, remove nothing
    """
    rmtree = (lambda path, ignore_errors: None) if dry_run else shutil.rmtree
    wanted = set(referenced(layout)) | {k.rstrip("/") for k in keep}
    removed = []
    for store in stores(layout, [store_of(k) or "" for k in keep if store_of(k)] + list(extra_stores)):
        for org in os.listdir(store) if os.path.isdir(store) else []:
            for name in os.listdir(os.path.join(store, org)) if os.path.isdir(os.path.join(store, org)) else []:
                folder = os.path.join(store, org, name)
                if not os.path.isdir(folder):
                    continue
                for entry in os.listdir(folder):
                    path = os.path.join(folder, entry)
                    if entry.startswith("."):
                        if not entry.endswith(".partial"):
                            continue  # a revision's lock goes with the revision
                        revision = entry[1:].split(".")[0]
                        stale = time.time() - os.path.getmtime(path) > STALE_MINUTES * 60
                        if stale and os.path.join(folder, revision) not in wanted:
                            rmtree(path, ignore_errors=True)
                            removed.append(path)
                        continue
                    if PINNED.match(entry) and path not in wanted:
                        rmtree(path, ignore_errors=True)
                        removed.append(path)
                        if os.path.exists(lock_of(path)) and not dry_run:
                            os.unlink(lock_of(path))
                if not os.listdir(folder):
                    os.rmdir(folder)
            if not dry_run and os.path.isdir(os.path.join(store, org)) and not os.listdir(os.path.join(store, org)):
                os.rmdir(os.path.join(store, org))
    return removed


def inventory(layout: Layout) -> dict:
    """The model store(s) as ``sglfleet status`` shows them: each revision, verified or not, and bytes used."""
    found, used = [], 0
    for store in stores(layout):
        for repo, revision, folder in revisions(store):
            marker = read_json(os.path.join(folder, MARKER), None)
            size = sum(seen[0] for seen in marker["files"].values()) if marker else sum(
                os.path.getsize(os.path.join(root, n)) for root, _, names in os.walk(folder) for n in names)
            used += size
            found.append({"repo": repo, "revision": revision, "bytes": size, "verified": marker is not None})
    return {"models": found, "models_bytes": used}


def main(argv: list, layout: Layout = LAYOUT) -> int:
    parser = argparse.ArgumentParser(prog="sglfleet-release models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check").add_argument("spec", help="JSON: [{dir, digest}]")
    stage = sub.add_parser("stage", help="the manifest comes on stdin")
    stage.add_argument("--dir", required=True)
    stage.add_argument("--source", choices=("hub", "controller"), required=True)
    stage.add_argument("--python", help="a python with huggingface_hub (the stack's)")
    stage.add_argument("--endpoint", help="an HF-compatible mirror (HF_ENDPOINT)")
    stage.add_argument("--peer", action="append", default=[],
                       help="the revision's URL on a peer host that staged it (http://node1:30090/org/name/rev)")
    collect_parser = sub.add_parser("collect")
    collect_parser.add_argument("--keep", action="append", default=[])
    collect_parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "check":
        print(json.dumps(check(json.loads(args.spec))))
        return 0
    if args.command == "collect":
        for path in collect(args.keep, layout, dry_run=args.dry_run):
            print(f"{'would remove' if args.dry_run else 'removed'} {path}")
        return 0
    text = sys.stdin.read()
    try:
        stager = Stager(json.loads(text), args.dir, args.source, args.python, args.endpoint, layout.env_file,
                        hashlib.sha256(text.encode()).hexdigest(), args.peer)
        print(stager.run())
    except NeedsUpload as needs:  # what is verified is kept: the next stage, after the upload, goes on from it
        print(f"{NEEDS} {json.dumps(needs.paths)}")
        return NEEDS_EXIT
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    except OSError as error:  # a full disk above all: the partial folder stays, to resume
        print(f"{args.dir}: {error.strerror or error} ({error.filename or ''}); what is verified is kept: "
              f"free space, then run the deploy again", file=sys.stderr)
        return 1
    return 0
