"""
Switch every targeted host back to its previous release, wave by wave, behind the gate.

    pyinfra inventory/prod.py rollback.py -y
    pyinfra inventory/prod.py rollback.py -y --limit wave2
"""

from pyinfra import host, state

from sglfleet.plan.fleet_plan import fleet_plan
from tasks.access import check_access
from tasks.rollout import roll_back

fleet = fleet_plan(state)

check_access()  # sudo alone: each host's releases are read in its own step
roll_back(fleet, fleet.hosts[host.name])
