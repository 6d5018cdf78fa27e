"""Which physical machine a controller's settings reach.

Two controllers of one config that reach the same machine would give it two runners: two
agents' worth of test cycles moving one arm at the same time, each blind to the other's motion.
Every driver whose settings reach something physical says what
(`MachineAddressed.machine_address`), in a canonical form, so that the config can refuse the
second one (agent.config.load). A simulated controller reaches nothing and says nothing.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit


@runtime_checkable
class MachineAddressed(Protocol):
    def machine_address(self) -> str:
        """The machine these settings reach, canonical: equal strings, one machine."""
        ...


def canonical_host(host: str) -> str:
    """A host name or address as one machine spells it: lower case, IP literals compressed,
    `localhost` as the loopback address (no name is looked up: a config check reads no DNS)."""
    text = host.strip().strip("[]").lower()
    if text == "localhost":
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.rstrip(".")


def canonical_device(path: str) -> str:
    """A device path with its symbolic links resolved (/dev/serial/by-id/... and /dev/ttyUSB0
    are one port)."""
    return os.path.realpath(path)


def canonical_endpoint(url: str, default_port: int) -> str:
    """scheme://host:port of a URL: the server, whatever path it is reached by."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port or default_port
    except ValueError:  # a malformed port: the URL as given is the best name there is
        return url.strip()
    return f"{parts.scheme.lower()}://{canonical_host(parts.hostname or '')}:{port}"
