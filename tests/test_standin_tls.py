"""
The stand-in serving TLS as the real sglang does (issue 41, part 5): a real process over the real
wheels' flags, a certificate from the fleet CA, the official ``openai`` SDK connecting through
https with that CA. 0.5.9 has no ``--ssl-*`` flag and refuses them as its argparse does; 0.5.14
and 0.5.23 take them, with 0.5.14's ``_handle_ssl_validation`` refusals word for word.
"""

import json
import ssl
import urllib.error
import urllib.request

import httpx
import pytest

from sglfleet.artifacts.tls import FleetCA
from test_server_flags import python_tree
from test_standin import KIMI_PATH, launch, sglang_059  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def issued(tmp_path_factory):
    """A fleet CA and node1's certificate, as files a unit's credentials folder holds."""
    folder = tmp_path_factory.mktemp("credentials")
    ca = FleetCA.beside(folder / "secrets.env")
    ca.ensure()
    pair = ca.issue("node1", ["127.0.0.1"])
    (folder / "tls.crt").write_text(pair.cert)
    (folder / "tls.key").write_text(pair.key)
    (folder / "ca.crt").write_text(ca.cert)
    return folder


def ssl_flags(folder) -> list[str]:
    return ["--ssl-certfile", str(folder / "tls.crt"), "--ssl-keyfile", str(folder / "tls.key"),
            "--ssl-ca-certs", str(folder / "ca.crt")]


def wait_https(proc, folder, timeout=20.0):
    import time
    context = ssl.create_default_context(cafile=folder / "ca.crt")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{proc.port}/health", timeout=5, context=context) as answer:
                if answer.status == 200:
                    return
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.2)
    raise AssertionError("the stand-in never answered /health over https")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_the_openai_sdk_streams_through_tls_verified_with_the_fleet_ca(launch, issued, version):
    from openai import OpenAI

    proc = launch(python_tree(version), *KIMI_PATH, "--host", "127.0.0.1", *ssl_flags(issued))
    wait_https(proc, issued)  # its own warm-up passed: it verified itself against --ssl-ca-certs
    client = OpenAI(base_url=f"https://127.0.0.1:{proc.port}/v1", api_key="none", max_retries=0,
                    http_client=httpx.Client(verify=ssl.create_default_context(cafile=issued / "ca.crt")))
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}],
                                            stream=True, max_tokens=8)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text.split()
    # A client that does not trust the fleet CA is refused by its own TLS stack.
    untrusting = OpenAI(base_url=f"https://127.0.0.1:{proc.port}/v1", api_key="none", max_retries=0)
    with pytest.raises(Exception) as refused:
        untrusting.models.list()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__ or refused.value) or \
        "certificate verify failed" in str(refused.value.__cause__ or refused.value)
    # Plain HTTP to the TLS port gets no answer: the connection is dropped, the server serves on.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{proc.port}/health", timeout=5)
    wait_https(proc, issued)


def test_0_5_9_refuses_the_ssl_flags_as_its_argparse_does(launch, sglang_059, issued):
    proc = launch(sglang_059, *KIMI_PATH, *ssl_flags(issued))
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "error: unrecognized arguments: --ssl-certfile" in err


@pytest.mark.parametrize("flags, message", [
    (["--ssl-certfile", "{d}/tls.crt"], "--ssl-certfile requires --ssl-keyfile to be specified as well."),
    (["--ssl-ca-certs", "{d}/ca.crt"], "--ssl-ca-certs has no effect without --ssl-certfile and --ssl-keyfile."),
    (["--ssl-certfile", "{d}/tls.crt", "--ssl-keyfile", "{d}/gone.key"],
     "SSL key file not found: '{d}/gone.key'. Please check the --ssl-keyfile path."),
])
def test_0_5_14_refuses_what_its_ssl_validation_refuses(launch, issued, flags, message):
    proc = launch(python_tree("0.5.14"), *KIMI_PATH, *(flag.format(d=issued) for flag in flags))
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert f"ValueError: {message.format(d=issued)}" in err
    assert "Uvicorn running" not in err and "PRIVATE KEY" not in err


def test_the_key_never_shows_in_the_logs(launch, issued):
    proc = launch(python_tree("0.5.23"), *KIMI_PATH, "--host", "127.0.0.1", *ssl_flags(issued))
    wait_https(proc, issued)
    proc.terminate()
    out, err = proc.communicate(timeout=20)
    key_body = (issued / "tls.key").read_text().splitlines()[1]
    assert "Uvicorn running on https://127.0.0.1" in err
    assert key_body not in out + err and "PRIVATE KEY" not in out + err
    assert json.dumps(str(issued / "tls.key"))[1:-1] in err  # the path is logged, as sglang logs it; never the key
