"""
The stand-in's TLS, as sglang 0.5.14 and later serve it: ``--ssl-certfile``, ``--ssl-keyfile``,
``--ssl-ca-certs`` (0.5.14 ``srt/server_args.py:545-547``; 0.5.23
``srt/arg_groups/fields/serving.py:139-147``). 0.5.9 declares none of them, so its parser
(``server_flags``, built from the installed ``server_args.py``) refuses them as argparse does,
exit 2, before this module is reached.

- ``check``: ``_handle_ssl_validation`` (0.5.14 ``server_args.py:2648-2686``; 0.5.23
  ``arg_groups/serving_hook.py``), its ``ValueError``s word for word, before anything loads.
- ``server_context``: what uvicorn builds from them (``ssl_certfile``, ``ssl_keyfile``,
  ``ssl_ca_certs``, no client certificate asked: 0.5.14 ``http_server.py:2341-2343``).
- ``warmup_context``: ``ssl_verify`` (0.5.14 ``server_args.py:6524-6536``): the warm-up verifies
  the server against ``--ssl-ca-certs``, or not at all without it.

The handshake runs in each connection's own thread, never in the accepting one: a client that
speaks plain HTTP to the TLS port is dropped alone.

**Example:**

.. code:: python

    check(args)                               # ValueError("--ssl-certfile requires --ssl-keyfile ...")
    context = server_context(args)            # None without --ssl-certfile
"""

from __future__ import annotations

import os
import ssl


def check(v: dict) -> None:
    """``_handle_ssl_validation``: the flags consistent, their files present (0.5.14 ``server_args.py:2648-2686``)."""
    cert, key, ca = v.get("ssl_certfile"), v.get("ssl_keyfile"), v.get("ssl_ca_certs")
    if key and not cert:
        raise ValueError("--ssl-keyfile requires --ssl-certfile to be specified as well.")
    if cert and not key:
        raise ValueError("--ssl-certfile requires --ssl-keyfile to be specified as well.")
    if not cert and not key:
        if ca:
            raise ValueError("--ssl-ca-certs has no effect without --ssl-certfile and --ssl-keyfile.")
        if v.get("ssl_keyfile_password"):
            raise ValueError("--ssl-keyfile-password has no effect without --ssl-certfile and --ssl-keyfile.")
    if key and not os.path.isfile(key):
        raise ValueError(f"SSL key file not found: '{key}'. Please check the --ssl-keyfile path.")
    if cert and not os.path.isfile(cert):
        raise ValueError(f"SSL certificate file not found: '{cert}'. Please check the --ssl-certfile path.")
    if ca and not os.path.isfile(ca):
        raise ValueError(f"SSL CA certificates file not found: '{ca}'. Please check the --ssl-ca-certs path.")


def server_context(v: dict) -> ssl.SSLContext | None:
    """The listening side's context, as uvicorn's ``create_ssl_context`` makes it; None without TLS."""
    if not v.get("ssl_certfile"):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(v["ssl_certfile"], v["ssl_keyfile"], v.get("ssl_keyfile_password"))
    if v.get("ssl_ca_certs"):
        context.load_verify_locations(v["ssl_ca_certs"])  # uvicorn loads it; no client certificate is asked
    return context


def warmup_context(v: dict) -> ssl.SSLContext | None:
    """``ssl_verify``: the CA where one is given, no verification where TLS is on without one; None without TLS."""
    if not v.get("ssl_certfile"):
        return None
    if v.get("ssl_ca_certs"):
        return ssl.create_default_context(cafile=v["ssl_ca_certs"])
    return ssl._create_unverified_context()  # sglang warns once and verifies nothing (server_args.py:6537-6545)
