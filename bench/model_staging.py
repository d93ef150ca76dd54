"""Benchmark: staging a pinned model on N local-fleet hosts from a mirror, against a plain ``hf download`` on each.

A model of ``--size-mb`` MB (safetensors shards of at most ``--shard-mb``,
config, tokenizer, index) is committed to a mirror folder and served by olah
(offline) on the fleet's bridge address; its manifest is written with
``sglfleet model lock``. Then, on every host at once (as phase A runs):

- ``sglfleet``: the host tool's ``models stage`` (the stack's huggingface_hub
  fetches, every file is checked against the manifest, the folder renamed into
  place), then ``models check`` as a second converge runs it;
- ``hf download``: the same stack's ``hf download --revision SHA --local-dir``
  (no content check), then the same command again.

Bytes fetched from the source are counted from olah's access log (the
manifest's size of every file GET), per method. Needs the local fleet up and
converged (host tool and dev stack in place); removes what it staged.

**Example:**

.. code:: shell

    .venv/bin/python bench/model_staging.py --size-mb 256 --shard-mb 64
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from mirroring import Mirror, commit, write_model  # noqa: E402

from sglfleet.artifacts.models import load_manifest  # noqa: E402
from sglfleet.artifacts.stacks import load_stack  # noqa: E402
from sglfleet.devfleet.rootfs import PYTHONS, SUITE  # noqa: E402  # the benchmarks' hosts run the default OS
from sglfleet.devfleet import Fleet  # noqa: E402
from sglfleet.host.layout import LAYOUT  # noqa: E402

REPO = "benchorg/bench-model"
SGLFLEET = str(Path(sys.executable).with_name("sglfleet"))


def fetched(mirror: Mirror, since: int, sizes: dict) -> int:
    """Bytes of the files olah answered a GET for since request number ``since``."""
    total = 0
    for line in mirror.requests()[since:]:
        found = re.search(r'"GET /[^ ]*/resolve/[0-9a-f]{40}/(\S+) HTTP', line)
        if found and " 200" in line:
            total += sizes.get(found.group(1), 0)
    return total


def on_all(fleet, hosts, command_of) -> dict:
    """Run ``command_of(host)`` on every host at once; seconds each took (host clock)."""
    def one(host):
        out = fleet.exec(host, f"s=$(date +%s.%N); {command_of(host)} >/dev/null; e=$(date +%s.%N); echo $s $e",
                         timeout=1800).stdout.split()
        return float(out[-1]) - float(out[-2])
    with ThreadPoolExecutor(len(hosts)) as pool:
        return dict(zip(hosts, pool.map(one, hosts)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--shard-mb", type=int, default=64)
    args = parser.parse_args()

    fleet = Fleet(log=lambda line: None)
    hosts = fleet.hosts
    python = LAYOUT.python(load_stack("dev").for_python(PYTHONS[SUITE]).id)
    shards = [args.shard_mb << 20] * (args.size_mb // args.shard_mb) or [args.size_mb << 20]
    with tempfile.TemporaryDirectory(prefix="sglfleet-bench-") as tmp:
        tmp = Path(tmp)
        sha = commit(tmp / "mirror", REPO, write_model(tmp / "src", seed=7, shard_sizes=shards), "bench")
        gateway = fleet.state()["gateway"]
        with socket.socket() as sock:
            sock.bind((gateway, 0))
            port = sock.getsockname()[1]
        with Mirror(tmp / "mirror", gateway, port) as mirror:
            env = {**os.environ, "SGLFLEET_MODELS": str(tmp / "manifests")}
            subprocess.run([SGLFLEET, "model", "lock", f"{REPO}@{sha}", "--endpoint", mirror.url], env=env,
                           check=True, capture_output=True)
            manifest = load_manifest(REPO, sha, tmp / "manifests")
            sizes = {f.path: f.size for f in manifest.files}
            final = LAYOUT.model(REPO, sha)
            spec = json.dumps([{"dir": final, "digest": manifest.digest}])
            for host in hosts:
                fleet.exec(host, f"rm -rf {LAYOUT.models}/benchorg /tmp/hf-bench && "
                                 f"cat > /tmp/bench-manifest.json << 'EOF'\n{manifest.text}EOF")
            report = {"hosts": len(hosts), "model_bytes": manifest.size, "files": len(manifest.files)}

            mark = len(mirror.requests())
            report["sglfleet_stage_s"] = on_all(fleet, hosts, lambda h: (
                f"{LAYOUT.tool} models stage --dir {final} --source hub --python {python} "
                f"--endpoint {mirror.url} < /tmp/bench-manifest.json"))
            report["sglfleet_fetched_bytes"] = fetched(mirror, mark, sizes)
            mark = len(mirror.requests())
            report["sglfleet_second_converge_s"] = on_all(fleet, hosts, lambda h: f"{LAYOUT.tool} models check '{spec}'")
            report["sglfleet_second_fetched_bytes"] = fetched(mirror, mark, sizes)

            hf = (f"HF_ENDPOINT={mirror.url} HF_HUB_DISABLE_XET=1 HF_HOME=/tmp/hf-bench/home "
                  f"{os.path.dirname(python)}/hf download {REPO} --revision {sha} --local-dir /tmp/hf-bench/dl")
            mark = len(mirror.requests())
            report["hf_download_s"] = on_all(fleet, hosts, lambda h: hf)
            report["hf_download_fetched_bytes"] = fetched(mirror, mark, sizes)
            mark = len(mirror.requests())
            report["hf_download_again_s"] = on_all(fleet, hosts, lambda h: hf)
            report["hf_download_again_fetched_bytes"] = fetched(mirror, mark, sizes)
            for host in hosts:
                fleet.exec(host, f"rm -rf {LAYOUT.models}/benchorg /tmp/hf-bench /tmp/bench-manifest.json")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
