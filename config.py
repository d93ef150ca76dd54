"""
pyinfra's configuration for sglfleet deploys (loaded from the working directory).

The inventory is validated as soon as pyinfra has built it, before any SSH
connection: bad input gets one message per problem and touches no host. A valid
one is planned once, for the whole run (``sglfleet.plan.fleet_plan``). A run
that executes keeps its events in the controller's event log. A dry run always
shows its plan. A rollout ends with a summary that names the hosts
that failed. A Ctrl-C exits 130 and says what it left. Each hook is in ``sglfleet/hooks/``.
"""

import atexit

from pyinfra import state

from sglfleet.hooks.dryrun import plan_when_dry
from sglfleet.hooks.engine import faster_pyinfra
from sglfleet.hooks.event_log import record_events
from sglfleet.hooks.init import after_init
from sglfleet.hooks.interrupt import exit_130_on_interrupt
from sglfleet.hooks.planning import plan_before_connecting
from sglfleet.hooks.reads import read_on_connect
from sglfleet.record.summary import print_summary

faster_pyinfra()  # pyinfra's costs an operation cut, what it computes unchanged (sglfleet/hooks/engine.py)
after_init(state, plan_before_connecting, record_events, read_on_connect)  # in this order, before connecting
plan_when_dry(state)
exit_130_on_interrupt()
atexit.register(print_summary, state)
