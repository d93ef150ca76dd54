"""Workers that listen on loopback only, behind a gateway on another host."""

import pathlib as _pathlib, runpy as _runpy
_fleet = _runpy.run_path(str(_pathlib.Path(__file__).with_name("_fleet.py")))
_expect = ["node1, node2, node3: listen_host = '127.0.0.1': the gateways (node4) cannot reach it",
           "leave listen_host unset"]  # fragments of the one message

canary, wave1, wave2 = _fleet['waves'](listen_host="127.0.0.1")
gateways = [_fleet['host']("node4")]
