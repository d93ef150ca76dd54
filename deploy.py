"""
Converge SGLang + EAGLE-3 hosts, then roll the new release out batch by batch, canary first; and the gateways.

    pyinfra inventory/prod.py deploy.py -y            # converge and roll out
    pyinfra inventory/prod.py deploy.py --dry --diff  # the plan as diffs, changing nothing

config.py validated the inventory before any connection.
"""

from tasks.access import check_access
from tasks.drift import drift_repaired
from tasks.gateway import install_gateway
from tasks.models import collect_models, stage_models
from tasks.patch import patch_sglang
from tasks.preflight import preflight
from tasks.release import stage_release
from tasks.rollout import roll_out
from tasks.service import install_service
from tasks.stack import install_stack

# Phase A, every host at once: nothing that serves traffic changes.
check_access()
preflight()
install_service()
install_stack()
patch_sglang()
stage_models()
stage_release()

# Phase B, batch by batch, canary first: only hosts whose staged release differs restart.
roll_out()
collect_models()
# The gateways (group gateways), one at a time: only those whose configuration differs restart;
# a host that left the group stops its gateway.
# pyinfra runs a gateway host's operations once its own earlier ones are done, so this may come
# before the serving hosts switch; the rollout drains and rejoins them through whichever gateway runs.
install_gateway()
# Last: what this run found changed by hand on a host is repaired there by now.
drift_repaired()
