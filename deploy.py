"""
Converge SGLang + EAGLE-3 hosts, then roll the new release out batch by batch, canary first; and the gateways.

    pyinfra inventory/prod.py deploy.py -y            # converge and roll out
    pyinfra inventory/prod.py deploy.py --dry --diff  # the plan as diffs, changing nothing

config.py validated the inventory and planned the whole fleet before any connection.
"""

from pyinfra import host, state

from sglfleet.controller.reads import read_host
from sglfleet.plan.fleet_plan import fleet_plan
from sglfleet.record.run import record
from tasks.access import check_access
from tasks.drift import drift_repaired
from tasks.firewall import enforce_policy
from tasks.gateway import install_gateway
from tasks.models import collect_models, stage_models
from tasks.patch import patch_sglang
from tasks.preflight import preflight
from tasks.release import stage_release
from tasks.rollout import roll_out
from tasks.service import install_service
from tasks.stack import install_stack

fleet = fleet_plan(state)       # every host's services, stack, releases and files; the rollout's batches
run = record(state)             # what this run learns and reports, passed to the steps that need it
plan = fleet.hosts[host.name]   # this host's part
found = read_host(host, fleet, run)  # what it holds and serves: one command (the first reads every host at once)

# Phase A, every host at once: nothing that serves traffic changes.
check_access(found)
preflight(plan, found, run)
install_service(plan, found)
enforce_policy(plan, found)    # only the gateways reach the engines; confirmed over a new connection
install_stack(fleet, plan, found, run)
patch_sglang(plan, found, run)
stage_models(fleet, plan, found)
stage_release(plan, found)

# Phase B, batch by batch, canary first: only hosts whose staged release differs restart.
roll_out(fleet, plan, found, run)
collect_models(plan)
# The gateways (group gateways), one at a time: only those whose configuration differs restart;
# a host that left the group stops its gateway.
# pyinfra runs a gateway host's operations once its own earlier ones are done, so this may come
# before the serving hosts switch; the rollout drains and rejoins them through whichever gateway runs.
install_gateway(fleet, plan, found)
# Last: what this run found changed by hand on a host is repaired there by now.
drift_repaired(plan, found)
