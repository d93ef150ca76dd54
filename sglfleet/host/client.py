"""Requests from a host to its own SGLang server, with the API key from the env file; over https, verified
with the fleet CA (``/etc/sglfleet/tls/ca.crt``, root's) where the server serves TLS."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

from .layout import LAYOUT, Layout


def api_key(layout: Layout = LAYOUT, variable: str = "SGLANG_API_KEY") -> str | None:
    """The API key (or ``variable``, e.g. the admin key) from the root-only env file, so requests
    pass ``--api-key``; never printed."""
    try:
        with open(layout.env_file) as handle:
            for line in handle:
                name, _, value = line.strip().partition("=")
                if name == variable and value:
                    return value.strip('"')
    except OSError:
        pass
    return None


def request(url: str, body=None, timeout: float = 5.0, key: str | None = None) -> tuple[int, str]:
    """
    GET (or POST ``body`` as JSON) ``url``; return ``(status, text)``, status 0 when nothing answered.

    + url: e.g. ``http://127.0.0.1:30000/health``
    + body: a JSON-able request body, or None for a GET
    + timeout: seconds for the whole answer
    + key: the API key (``Authorization: Bearer``), or None

    **Example:**

    .. code:: python

        status, text = request("http://127.0.0.1:30000/health", timeout=25)
    """
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        # https: the server's certificate comes from the fleet CA, whose certificate the host holds (root-only).
        context = ssl.create_default_context(cafile=LAYOUT.tls_ca) if url.startswith("https://") else None
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers),
                                    timeout=timeout, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (OSError, ValueError) as error:
        return 0, str(error)


def base_url(release: dict) -> str:
    """Where the host reaches its own server: a wildcard listen address means loopback; https where the
    release serves TLS (``--ssl-certfile`` among its arguments, sglfleet.plan.tls)."""
    launch = release["launch"]
    address = launch.get("listen_host") or launch.get("host") or "127.0.0.1"
    if address in ("0.0.0.0", "::"):
        address = "127.0.0.1"
    scheme = "https" if "--ssl-certfile" in release.get("args", ()) else "http"
    return f"{scheme}://{address}:{launch.get('listen_port') or launch.get('port') or 30000}"
