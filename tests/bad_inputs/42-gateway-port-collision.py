"""The gateway's metrics on the port it serves clients on."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = [":30080: port collision between node4's gateway_port and node4's gateway_metrics_port"]  # fragments
_data = ['gateway_metrics_port=30080']  # pyinfra --data overrides

canary, wave1, wave2 = _fleet['waves'](listen_host="0.0.0.0")
gateways = [_fleet['host']("node4")]
