"""
Temporary files on hosts: each run writes its own, beside the file it replaces,
and the next run finds those that killed runs left (older than
``sglfleet.host.layout.STALE_MINUTES``).
"""

import posixpath
import re
from secrets import token_hex as _token_hex

# Names this controller run's temporary files on hosts, so two runs at once
# never write, rename or remove each other's.
RUN_TOKEN = _token_hex(4)


def temporary_beside(path: str) -> str:
    """
    This run's temporary name for ``path``, in the same directory, so that the
    final ``mv`` is one atomic rename.

    + path: the file the temporary will replace

    **Example:**

    .. code:: python

        temporary_beside("/etc/sglfleet/sglang.env")  # "/etc/sglfleet/.sglang.env.sglfleet-3f2a9c1d"
    """
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name}.sglfleet-{RUN_TOKEN}")


def temporaries_pattern(path: str) -> str:
    """
    A ``find -path`` pattern that matches every run's temporaries of ``path``.

    + path: the file the temporaries replace

    **Example:**

    .. code:: python

        temporaries_pattern("/etc/sglfleet/sglang.env")  # "/etc/sglfleet/.sglang.env.sglfleet-*"
    """
    directory, name = posixpath.split(path)
    literal = re.sub(r"([*?[])", r"[\1]", f"{directory}/.{name}")  # glob characters match themselves
    return f"{literal}.sglfleet-*"
