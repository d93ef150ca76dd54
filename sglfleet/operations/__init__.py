"""sglfleet's pyinfra operations."""

import secrets

# Names this controller run's temporary files on hosts, so two runs at once
# never write, rename or remove each other's.
RUN_TOKEN = secrets.token_hex(4)
