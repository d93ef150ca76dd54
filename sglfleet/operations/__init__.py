"""sglfleet's pyinfra operations."""

from secrets import token_hex as _token_hex  # not `import secrets`: that would shadow .secrets

# Names this controller run's temporary files on hosts, so two runs at once
# never write, rename or remove each other's.
RUN_TOKEN = _token_hex(4)
