"""
TLS where the stack allows it (issue 41, part 5): the fleet CA the controller makes once, the
server certificates it issues, the operator's own pair checked before any connection. Real
certificates, verified by Python's ``ssl`` over loopback as a client verifies them.
"""

import socket
import ssl
import stat
import threading

import pytest

from sglfleet.artifacts.tls import FleetCA, Pair, TlsError, describe, load_pair, names_of


@pytest.fixture
def ca(tmp_path):
    found = FleetCA.beside(tmp_path / "secrets.env")
    assert found.ensure() is True
    return found


def handshake(pair: Pair, tmp_path, cafile, server_hostname: str) -> str:
    """Serve ``pair`` once on loopback and connect to it with ``cafile`` as the trust; the peer's CN."""
    (tmp_path / "srv.crt").write_text(pair.cert)
    (tmp_path / "srv.key").write_text(pair.key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "srv.crt", tmp_path / "srv.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept():
        conn, _ = listener.accept()
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        client = ssl.create_default_context(cafile=cafile)
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                client.wrap_socket(raw, server_hostname=server_hostname) as tls:
            subject = dict(one[0] for one in tls.getpeercert()["subject"])
            tls.sendall(b"x")
            return subject["commonName"]
    finally:
        thread.join(5)
        listener.close()


def test_the_ca_is_made_once_private_and_reused(ca, tmp_path):
    assert ca.folder == tmp_path / "secrets.env.tls"
    assert stat.S_IMODE(ca.folder.stat().st_mode) == 0o700
    for name in ("ca.key", "ca.crt"):
        assert stat.S_IMODE((ca.folder / name).stat().st_mode) == 0o600
    before = (ca.folder / "ca.key").read_bytes()
    assert ca.ensure() is False  # made once, then reused
    assert FleetCA.beside(tmp_path / "secrets.env").ensure() is False
    assert (ca.folder / "ca.key").read_bytes() == before
    assert not [path for path in ca.folder.iterdir() if path.name.startswith(".ca.")]  # no temporaries left


def test_an_issued_certificate_verifies_against_the_ca_by_address_and_name(ca, tmp_path):
    pair = ca.issue("node1", ["10.0.0.11", "node1.fleet.internal"])
    assert "PRIVATE KEY" not in repr(pair) and "PRIVATE KEY" not in describe(pair.cert)
    assert set(names_of(pair.cert)) == {"10.0.0.11", "node1.fleet.internal", "127.0.0.1", "localhost"}
    # The address (an IP SAN), a DNS name and loopback each verify; a name it does not carry does not.
    for name in ("10.0.0.11", "node1.fleet.internal", "127.0.0.1"):
        assert handshake(pair, tmp_path, ca.cert_path, name) == "node1"
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(pair, tmp_path, ca.cert_path, "10.0.0.12")


def test_a_client_that_trusts_another_ca_refuses_the_certificate(ca, tmp_path):
    other = FleetCA(tmp_path / "other")
    other.ensure()
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(ca.issue("node1", ["10.0.0.11"]), tmp_path, other.cert_path, "10.0.0.11")


def test_issue_is_idempotent_and_renews_only_what_no_longer_fits(ca, tmp_path):
    first = ca.issue("node1", ["10.0.0.11"])
    assert ca.issue("node1", ["10.0.0.11"]) == first  # a second converge: the same files, nothing new
    assert stat.S_IMODE((ca.folder / "issued" / "node1.key").stat().st_mode) == 0o600
    moved = ca.issue("node1", ["10.0.0.21"])  # the host's address changed: a new certificate
    assert moved.fingerprint != first.fingerprint and "10.0.0.21" in names_of(moved.cert)
    # A CA made again (its folder lost) does not keep certificates of the old one.
    (ca.folder / "ca.key").unlink()
    ca.ensure()
    assert ca.issue("node1", ["10.0.0.21"]).fingerprint != moved.fingerprint


def test_the_operators_pair_is_checked_before_anything_connects(ca, tmp_path):
    pair = ca.issue("gw1", ["gateway.example.com"])
    other = ca.issue("gw2", ["gateway.example.com"])
    (tmp_path / "gw.crt").write_text(pair.cert)
    (tmp_path / "gw.key").write_text(pair.key)
    (tmp_path / "wrong.key").write_text(other.key)
    (tmp_path / "junk.crt").write_text("not a certificate\n")
    assert load_pair(tmp_path / "gw.crt", tmp_path / "gw.key") == pair
    with pytest.raises(TlsError, match=r"missing\.crt: no such file"):
        load_pair(tmp_path / "missing.crt", tmp_path / "gw.key")
    with pytest.raises(TlsError, match=r"junk\.crt: not a PEM certificate"):
        load_pair(tmp_path / "junk.crt", tmp_path / "gw.key")
    with pytest.raises(TlsError, match=r"wrong\.key: not the private key of .*gw\.crt \(sha256:[0-9a-f]{16}\)") as error:
        load_pair(tmp_path / "gw.crt", tmp_path / "wrong.key")
    assert "PRIVATE" not in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("serves_tls", [True, False])
def test_the_controller_reaches_a_gateway_still_on_the_other_scheme(ca, tmp_path, serves_tls):
    """
    TLS turned on or off in one run: the gateways restart last, so until then the controller's calls,
    planned on the new scheme, meet the old one; they are made again on it (verified with the fleet CA).
    """
    import http.server
    import json

    from sglfleet.controller import router

    class Workers(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"workers": [{"id": "w1", "url": "http://10.0.0.11:30000", "is_healthy": True}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Workers)
    if serves_tls:
        pair = ca.issue("gw1", ["127.0.0.1"])
        (tmp_path / "gw.crt").write_text(pair.cert)
        (tmp_path / "gw.key").write_text(pair.key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp_path / "gw.crt", tmp_path / "gw.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        planned = f"{'http' if serves_tls else 'https'}://127.0.0.1:{port}"
        assert list(router.workers(planned, ca=ca.cert)) == ["http://10.0.0.11:30000"]
        if serves_tls:  # its certificate is still verified: a CA it was not issued by is refused
            other = FleetCA(tmp_path / "other")
            other.ensure()
            with pytest.raises(router.RouterError, match="refused its certificate .unable to get local issuer certificate; trusting the fleet's 1 certificates"):
                router.workers(planned, ca=other.cert)
    finally:
        server.shutdown()
