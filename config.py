"""
pyinfra's configuration for sglfleet deploys (loaded from the working directory).

The inventory is validated as soon as pyinfra has built it, before any SSH
connection: bad input gets one message per problem and touches no host. A valid
one is planned once, for the whole run (``sglfleet.plan.fleet_plan``). A run
that executes keeps its events in the controller's event log. A dry run always
shows its plan. A rollout ends with a summary that names the hosts
that failed. A Ctrl-C exits 130 and says what it left.
"""

import atexit

from pyinfra import state

from sglfleet.plan.validation import plan_before_connecting
from sglfleet.hooks.engine import faster_pyinfra
from sglfleet.run.dryrun import plan_when_dry
from sglfleet.run.interrupt import exit_130_on_interrupt
from sglfleet.run.reads import read_on_connect
from sglfleet.run.recording import record_events
from sglfleet.run.summary import print_summary

faster_pyinfra()  # pyinfra's costs an operation cut, what it computes unchanged (sglfleet/hooks/engine.py)
plan_before_connecting(state)
record_events(state)
read_on_connect(state)
plan_when_dry(state)
exit_130_on_interrupt()
atexit.register(print_summary)
