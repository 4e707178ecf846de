"""A network namespace of a test's own, linked to the host by a veth pair on a random private /30: a process run
inside it reaches the host only through that link, so taking the link down partitions it from Postgres and
Redis while it keeps running (a gray failure, not a crash).

Needs root and `ip` (iproute2). Names carry this process's id, so that a later run removes what a killed run
left behind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

NAMESPACE_PREFIX = "llr-chaos-"
#: Where the /30 is picked: 10.200.0.0-10.254.255.255, clear of the 10.0/10.1 networks that hosts and container
#: runtimes tend to use.
FIRST_OCTET_RANGE = (200, 254)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "`ip` (iproute2) is not installed"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_abandoned() -> list[str]:
    """Delete the namespaces of runs whose process is gone (their veth pairs go with them); the names removed."""
    listed = _ip("netns", "list", check=False).stdout.split()
    removed = []
    for name in listed:
        if not name.startswith(NAMESPACE_PREFIX):
            continue
        pid = name[len(NAMESPACE_PREFIX) :].split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            _ip("netns", "delete", name, check=False)
            removed.append(name)
    return removed


def _free_network() -> ipaddress.IPv4Network:
    """A random /30 in 10.x that no interface here has an address in."""
    used = [
        ipaddress.ip_interface(field).network
        for line in _ip("-4", "-o", "addr", "show").stdout.splitlines()
        for field in line.split()[3:4]
    ]
    chooser = random.SystemRandom()  # not the chaos seed: parallel runs with one seed must not collide
    for _ in range(100):
        base = f"10.{chooser.randint(*FIRST_OCTET_RANGE)}.{chooser.randint(0, 255)}.{chooser.randrange(0, 256, 4)}"
        network = ipaddress.IPv4Network(f"{base}/30")
        if not any(network.overlaps(other) for other in used):
            return network
    raise RuntimeError("no free /30 in 10.200-254.x.x")


@dataclass(frozen=True)
class NetworkNamespace:
    """`name`'s side of the link is `inner_address`; the host's is `host_address` on `host_link`."""

    name: str
    host_link: str
    inner_link: str
    network: ipaddress.IPv4Network

    @property
    def host_address(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def inner_address(self) -> str:
        return str(self.network.network_address + 2)

    def wrapper(self) -> Sequence[str]:
        """What runs a command inside (`ip netns exec` execs it: signals reach the command itself)."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        """Partition: the host side of the link goes down; connections through it hang (no reset), as in a
        network failure."""
        _ip("link", "set", self.host_link, "down")

    def mend(self) -> None:
        _ip("link", "set", self.host_link, "up")

    def reachable(self, port: int, timeout_s: float = 2.0) -> bool:
        """Whether a TCP connection from inside to the host's `port` gets an answer (accepted or refused)."""
        probe = (
            "import socket, sys\n"
            "try:\n"
            f"    socket.create_connection(({self.host_address!r}, {port}), timeout={timeout_s}).close()\n"
            "except ConnectionRefusedError:\n"
            "    pass\n"
            "except OSError:\n"
            "    sys.exit(1)\n"
        )
        ran = subprocess.run([*self.wrapper(), sys.executable, "-c", probe], capture_output=True, timeout=30)
        return ran.returncode == 0


def _create() -> NetworkNamespace:
    tag = f"{random.SystemRandom().getrandbits(24):06x}"
    # Link names: at most 15 characters.
    namespace = NetworkNamespace(f"{NAMESPACE_PREFIX}{os.getpid()}-{tag}", f"lrh{tag}", f"lrn{tag}", _free_network())
    prefix = namespace.network.prefixlen
    _ip("netns", "add", namespace.name)
    inside = ["netns", "exec", namespace.name, "ip"]
    try:
        _ip("link", "add", namespace.host_link, "type", "veth", "peer", "name", namespace.inner_link)
        _ip("link", "set", namespace.inner_link, "netns", namespace.name)
        _ip("addr", "add", f"{namespace.host_address}/{prefix}", "dev", namespace.host_link)
        _ip("link", "set", namespace.host_link, "up")
        _ip(*inside, "addr", "add", f"{namespace.inner_address}/{prefix}", "dev", namespace.inner_link)
        _ip(*inside, "link", "set", namespace.inner_link, "up")
        _ip(*inside, "link", "set", "lo", "up")
    except BaseException:
        _destroy(namespace)
        raise
    return namespace


def _destroy(namespace: NetworkNamespace) -> None:
    # Deleting the namespace destroys its end of the pair, and with it the host's; the host's is deleted too in
    # case the pair never reached the namespace.
    _ip("netns", "delete", namespace.name, check=False)
    with contextlib.suppress(subprocess.SubprocessError):
        if _ip("link", "show", namespace.host_link, check=False).returncode == 0:
            _ip("link", "delete", namespace.host_link, check=False)


@contextlib.contextmanager
def network_namespace() -> Iterator[NetworkNamespace]:
    """A namespace linked to the host, deleted with its link afterwards, whatever happened meanwhile (processes
    still running inside must be stopped first: a namespace outlives its name while they live)."""
    remove_abandoned()
    namespace = _create()
    try:
        yield namespace
    finally:
        _destroy(namespace)
