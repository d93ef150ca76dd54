"""
The host side of sglfleet: what runs on each host, with the host's own python3.

Standard library only, Python 3.9 or newer, relative imports only: the package
is shipped to hosts as ``/opt/sglfleet/lib/sglfleet_host/`` and run through
``/opt/sglfleet/bin/sglfleet-release``. The controller imports the same
modules as ``sglfleet.host`` (the layout, the pure judging of a bake).

One module per concern: ``layout`` (paths), ``client`` (requests to the local
server), ``prometheus`` (reading /metrics), ``service`` (systemd), ``releases``
(links, records, the lock), ``gate`` (the start-up gate), ``bake`` (judging
over time), ``stacks`` (a venv's snapshot), ``share`` (files served to peer
hosts) and ``cli`` (the ``sglfleet-release`` command).
"""
