"""A free TCP port on 127.0.0.1: every server the forge starts (a cache remote, act's artifact
server, a local registry) listens on the loopback only."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; a caller binds it soon after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
