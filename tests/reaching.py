"""Whether a TCP port answers, tried from the controller or from inside a host of the local fleet."""

from __future__ import annotations

import socket

# connect_ex's errno: 0 when the port took the connection; a dropped SYN times out.
PROBE = ("python3 -c 'import socket, sys; s = socket.socket(); s.settimeout(3); "
         "print(s.connect_ex((sys.argv[1], int(sys.argv[2]))))' {address} {port}")


def from_controller(address: str, port: int, timeout: float = 3) -> bool:
    """Whether ``address:port`` takes a TCP connection from the controller."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def from_host(fleet, host: str, address: str, port: int) -> bool:
    """Whether ``address:port`` takes a TCP connection from ``host`` (through nsenter: nothing logs in)."""
    return fleet.inside(host, PROBE.format(address=address, port=port)).stdout.strip() == "0"
