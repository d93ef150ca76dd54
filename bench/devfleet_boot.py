"""
Benchmark the local fleet: boot time of 3 hosts with a cold and a cached rootfs,
and the memory of one idle host. Not a test; run it as root:

    .venv/bin/python bench/devfleet_boot.py            # cold (debootstrap) and cached
    .venv/bin/python bench/devfleet_boot.py --cached   # cached only, using .cache/rootfs

It uses a private fleet (its own state dir, bridge sglfleetb0, subnet
10.213.50.0/24) and, for the cold run, its own rootfs, so a running
``sglfleet devfleet`` fleet is left alone.
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from sglfleet.devfleet import CACHE, ROOTFS, Fleet, build_rootfs, idle_memory


def _du_mb(path: Path) -> float:
    total = sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())
    return round(total / 2**20, 1)


def _boot(fleet: Fleet, hosts: int) -> float:
    started = time.monotonic()
    fleet.up(hosts)
    return round(time.monotonic() - started, 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--cached", action="store_true", help="skip the cold (debootstrap) run")
    parser.add_argument("--idle-s", type=float, default=10, help="settle time before measuring memory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-devfleet-", dir=CACHE))
    results = {"hosts": args.hosts}
    try:
        rootfs = ROOTFS
        if not args.cached:
            rootfs = work / "rootfs"
            fleet = Fleet(state_dir=work / "fleet", subnet="10.213.50.0/24", bridge="sglfleetb0",
                          prefix="b", rootfs=rootfs, log=lambda line: None)
            started = time.monotonic()
            build_rootfs(rootfs, log=lambda line: None)
            results["rootfs_build_s"] = round(time.monotonic() - started, 1)
            results["cold_boot_s"] = round(results["rootfs_build_s"] + _boot(fleet, args.hosts), 1)
            results["rootfs_mb"] = _du_mb(rootfs)
            fleet.down()
        else:
            build_rootfs(rootfs)
        fleet = Fleet(state_dir=work / "fleet", subnet="10.213.50.0/24", bridge="sglfleetb0",
                      prefix="b", rootfs=rootfs, log=lambda line: None)
        results["cached_boot_s"] = _boot(fleet, args.hosts)
        results["per_host_boot_s"] = {name: fleet.state()["hosts"][name]["booted_s"]
                                      for name in fleet.hosts}
        time.sleep(args.idle_s)
        results["idle_host"] = idle_memory(fleet, "node1")
        results["idle_host"]["overlay_upper_mb"] = _du_mb(work / "fleet/hosts/node1/upper")
        fleet.down()
    finally:
        Fleet(state_dir=work / "fleet", bridge="sglfleetb0").down()
        shutil.rmtree(work, ignore_errors=True)

    print(json.dumps(results, indent=2))
    if "cold_boot_s" in results:
        print(f"3 hosts, cold rootfs (debootstrap {results['rootfs_build_s']}s): {results['cold_boot_s']}s")
    print(f"{args.hosts} hosts, cached rootfs: {results['cached_boot_s']}s")
    idle = results["idle_host"]
    print(f"one idle host: {idle['pss_mb']} MB PSS ({idle['rss_mb']} MB RSS) "
          f"in {idle['processes']} processes")


if __name__ == "__main__":
    main()
