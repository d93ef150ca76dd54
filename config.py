"""
pyinfra's configuration for sglfleet deploys (loaded from the working directory).

The inventory is validated as soon as pyinfra has built it, before any SSH
connection: bad input gets one message per problem and touches no host.
"""

from pyinfra import state

from sglfleet.validation import validate_before_connecting

validate_before_connecting(state)
