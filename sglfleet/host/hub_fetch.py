"""
Download files of one revision into a folder with huggingface_hub: run by a stack's python.

The host tool runs it as ``<stack venv>/bin/python hub_fetch.py REPO REVISION
FOLDER`` with the paths on stdin, one a line, and ``HF_ENDPOINT`` (a mirror),
``HF_TOKEN`` and ``HF_HOME`` in its environment only. It is the one module of
the host package that is not standard library: it imports huggingface_hub
from the stack (sglang's own dependency), so the library that fetches is the
hash-pinned one the stack's lock names. Files are fetched 8 at a time, as
``snapshot_download`` does; huggingface_hub checks sizes only, the host tool
checks digests afterwards.

**Example:**

.. code:: shell

    printf 'config.json\\nmodel-00001-of-00003.safetensors\\n' | \\
        HF_ENDPOINT=http://10.213.60.1:8090 venv/bin/python hub_fetch.py org/m 4d01... /models/.4d01....partial
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

# This folder holds the host tool's http.py, which would shadow the standard library's.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]


def main(argv):
    from huggingface_hub import hf_hub_download

    repo, revision, folder = argv
    paths = [line.strip() for line in sys.stdin.read().splitlines() if line.strip()]

    def fetch(path):
        try:
            hf_hub_download(repo, path, revision=revision, local_dir=folder)
        except Exception as error:  # the client's errors are many; the host tool reports the line
            message = str(error).strip().splitlines()
            raise SystemExit(f"{repo}@{revision[:12]}: {path}: {type(error).__name__}: "
                             f"{message[-1] if message else ''}") from None

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(fetch, paths))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
