"""Deploy for tests/test_stack_fleet.py: preflight and the stack, nothing else.

    pyinfra inventory/dev.py tests/data/stack_deploy.py -y
"""

from pyinfra import host, state

from sglfleet.controller.reads import read_host
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.record.run import record
from tasks.preflight import preflight
from tasks.stack import install_stack

fleet = fleet_plan(state)
plan = fleet.hosts[host.name]
run = record(state)
found = read_host(host, fleet, run)

preflight(plan, found, run)
install_stack(fleet, plan, found, run)
