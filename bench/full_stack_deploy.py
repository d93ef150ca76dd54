"""Deploy for bench/full_stack_build.py: the service step, then the stack, on GPU-less local-fleet hosts.

In the order deploy.py runs them, so the host gets what a real one gets: the
service step installs the host tools, among them the file server the stack's
fan-out starts on each host (``sglfleet_host/share.py``). Preflight is left out
on purpose: it refuses a CUDA stack on a host without a GPU, which is right for
a real fleet; here the build, the offline install and the GPU-less probe are
what is measured.

    pyinfra inventory/dev.py bench/full_stack_deploy.py -y --limit node1 --data stack=cu130-sglang-0.5.23
"""

from pyinfra import host, state

from sglfleet.controller.reads import read_host
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.record.run import record
from tasks.service import install_service
from tasks.stack import install_stack

fleet = fleet_plan(state)
plan = fleet.hosts[host.name]
run = record(state)
found = read_host(host, fleet, run)

install_service(plan, found)
install_stack(fleet, plan, found, run)
