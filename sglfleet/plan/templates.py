"""Render the files in ``files/templates``: the shape lives in the template, the logic here.

**Example:**

.. code:: python

    text = render_unit(config)
"""

from __future__ import annotations

import functools
import os
import shlex
from pathlib import Path

import jinja2

from sglfleet import FILES
from sglfleet.host.layout import GATEWAY, LAYOUT, Layout
from sglfleet.plan.network import TABLE

# $SGLFLEET_TEMPLATES points a run at another copy (an operator's, or a test's).
# smg's shutdown grace (180 s, smg 1.13.0 router_args.py:142) and its propagation window.
GATEWAY_STOP_TIMEOUT_S = 200
TEMPLATES = Path(os.environ.get("SGLFLEET_TEMPLATES", FILES / "templates"))


class TemplateRenderError(ValueError):
    """A template that does not render; the message names it and the fix."""


def arg_lines(args: list[str]) -> list[str]:
    """One flag and its values per line, shell-quoted: readable in the script and in diffs."""
    lines: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return [" ".join(shlex.quote(part) for part in line) for line in lines]


@functools.cache
def _environment(templates: str) -> jinja2.Environment:
    # One per directory: jinja2 then compiles each template once a run, not once a host.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(name: str, templates: Path = TEMPLATES, **context) -> str:
    """
    Render one template strictly: an undefined name is an error, not an empty string.

    + name: the file name in the templates directory, e.g. ``"sglang.service.j2"``
    + templates: the templates directory
    + context: the template's variables
    """
    environment = _environment(str(templates))
    try:
        return environment.get_template(name).render(**context)
    except jinja2.TemplateSyntaxError as error:
        raise TemplateRenderError(
            f"{templates / name}:{error.lineno}: {error.message}; fix the template syntax"
        ) from None
    except jinja2.TemplateNotFound:
        raise TemplateRenderError(f"{templates / name}: template not found; restore it from git") from None
    except jinja2.UndefinedError as error:
        raise TemplateRenderError(
            f"{templates / name}: {error.message}; use only the variables sglfleet passes "
            f"({', '.join(sorted(context))})"
        ) from None
    except jinja2.TemplateError as error:
        raise TemplateRenderError(f"{templates / name}: {error}; fix the template") from None


def render_unit(config, templates: Path = TEMPLATES, layout: Layout = LAYOUT, credentials: list[str] = ()) -> str:
    """
    The text of ``sglang.service`` for one host.

    + config: the host's ``HostConfig``
    + templates: the templates directory
    + layout: where things are on the host
    + credentials: its ``LoadCredential=`` values (``sglfleet.plan.tls.HostTls.credentials``), none without TLS

    **Example:**

    .. code:: python

        files.put(src=StringIO(render_unit(config)), dest=LAYOUT.unit_file, mode="644")
    """
    warmup = int(config.gate_warmup_s)
    return render(
        "sglang.service.j2",
        templates,
        service=layout.service,
        user=layout.service_user,
        root=layout.root,
        current=layout.current,
        env_file=layout.env_file,
        state_dir=layout.state_dir,
        cache_dir=layout.cache_dir,
        # systemd must not kill a start the gate still waits for
        start_timeout_s=max(warmup, 60) + 300,
        stop_timeout_s=config.stop_timeout_s,
        restart_s=f"{config.service_restart_s:g}",
        credentials=list(credentials),
    )


def render_gateway_unit(config, args: list[str], python: str, digest: str, templates: Path = TEMPLATES,
                        layout: Layout | None = None, credentials: list[str] = ()) -> str:
    """
    The text of ``sglang-gateway.service`` for one gateway host.

    + config: the gateway host's ``HostConfig``
    + args: its ``smg launch`` arguments (``sglfleet.plan.gateway.gateway_args``), no secrets
    + python: the gateway stack's python on the host
    + digest: the configuration's digest, which the running process carries
    + templates: the templates directory
    + layout: the gateway's paths (``GATEWAY``)
    + credentials: its ``LoadCredential=`` values (``sglfleet.plan.tls.HostTls.credentials``), none without TLS

    **Example:**

    .. code:: python

        render_gateway_unit(config, gateway_args(config, workers), stack.venv + "/bin/python", "9c41d0e2a7b35f18")
    """
    layout = layout or GATEWAY
    return render(
        "sglang-gateway.service.j2",
        templates,
        service=layout.service,
        env_file=layout.env_file,
        state_dir=layout.state_dir,
        digest=digest,
        python=python,
        launcher=layout.gateway_launcher,
        arg_lines=arg_lines(args),
        restart_s=f"{config.service_restart_s:g}",
        start_timeout_s=f"{config.gateway_start_timeout_s:g}",
        stop_timeout_s=GATEWAY_STOP_TIMEOUT_S,
        credentials=list(credentials),
        # The restart's hold (sglfleet.plan.network) lives in the firewall's table: none without it.
        hold_port=config.gateway_port if config.firewall else None,
        table=TABLE,
        hold_stop_s=GATEWAY_STOP_TIMEOUT_S,
        hold_start_s=f"{config.gateway_start_timeout_s + config.service_restart_s:g}",
    )
