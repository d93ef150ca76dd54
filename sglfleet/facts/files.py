"""Facts about files that pyinfra's own facts cannot give: the exact bytes."""

from __future__ import annotations

import base64
import binascii

from pyinfra.api import FactBase, FactProcessError
from pyinfra.api.command import QuoteString, make_formatted_string_command

PRESENT = "sglfleet-file-present"
ABSENT = "sglfleet-file-absent"


class FileBytes(FactBase):
    """
    Returns the exact bytes of a file (line endings, encoding, a missing final
    newline and all), or ``None`` when it does not exist. pyinfra's
    ``FileContents`` gives lines with their endings stripped, so the file
    travels as base64. An unreadable file fails the fact, and so the host.

    .. code:: python

        b"import logging\\r\\n..."

    **Example:**

    .. code:: python

        source = host.get_fact(FileBytes, path="/opt/app/kimi_k25.py")
    """

    def command(self, path: str):
        return make_formatted_string_command(
            "if test -e {0}; then echo {1} && base64 -w0 < {0} && echo; else echo {2}; fi",
            QuoteString(path), PRESENT, ABSENT,
        )

    def process(self, output):
        if output and output[0] == ABSENT:
            return None
        if not output or output[0] != PRESENT:
            raise FactProcessError(f"unexpected output from FileBytes: {output[:1]}")
        try:
            return base64.b64decode("".join(output[1:]), validate=True)
        except binascii.Error as error:
            raise FactProcessError(f"FileBytes output is not base64: {error}")
