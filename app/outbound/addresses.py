"""Which URLs and addresses the server may call: http(s) only, no control characters, public addresses only unless
the operator allows the host and port (RESPONSES_OUTBOUND_ALLOWED_HOSTS), checked on the address a name resolves to.

The allow-list's entries are `host`, `host:port`, `host:low-high` or `host:*`, where a host is a name, an IP or a
CIDR (an IPv6 one in brackets when it carries ports: `[::1]:8080`). A bare entry allows every port of its host,
except on the server's own machine: a loopback (or unspecified, 0.0.0.0) address is reached only through an entry
that names its ports, whether the URL names it or a name resolves to it, so that allowing one local receiver never
opens the server's own API, its database or anything else listening there. A bare entry that can only mean the
server's own machine (`127.0.0.1`, `::1`, `localhost`) is refused at start-up with the fix in the message."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}
#: Names that mean the server's own machine whatever resolves them.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class OutboundRefused(ValueError):
    """A URL or address this server will not call (the message says why; it names no secret)."""


class AllowedHostsInvalid(ValueError):
    """RESPONSES_OUTBOUND_ALLOWED_HOSTS cannot be used as written (the message names the entry and the fix)."""


@dataclass(frozen=True, slots=True)
class PortRange:
    """The ports an entry allows, both ends included (`*`: 1-65535)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str, entry: str) -> PortRange:
        if text == "*":
            return cls(1, 65535)
        low, _, high = text.partition("-")
        try:
            ports = cls(int(low), int(high or low))
        except ValueError:
            ports = cls(0, 0)
        if not 1 <= ports.low <= ports.high <= 65535:
            raise AllowedHostsInvalid(
                f"RESPONSES_OUTBOUND_ALLOWED_HOSTS: '{entry}' has no valid ports after its host: write a port "
                "(host:8080), a range (host:8000-8100) or every port (host:*)."
            )
        return ports

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high


def is_loopback(address: IpAddress) -> bool:
    """The server's own machine: a loopback address, or the unspecified one (a connection to 0.0.0.0 goes to the
    local host), judged on the IPv4 address an IPv4-mapped IPv6 one carries."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


@dataclass(frozen=True, slots=True)
class AllowedEntry:
    """One entry of the setting: a name or a network, and its ports (None: a bare entry, every port off loopback)."""

    name: str | None
    network: IpNetwork | None
    ports: PortRange | None

    def allows_port(self, port: int, *, loopback: bool) -> bool:
        if self.ports is None:
            return not loopback
        return port in self.ports


def _split_ports(entry: str) -> tuple[str, str | None]:
    """'host:ports' -> (host, ports); '[v6]:ports' and '[v6]' unbracketed; a bare IPv6 keeps its colons."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise AllowedHostsInvalid(f"RESPONSES_OUTBOUND_ALLOWED_HOSTS: '{entry}' is not '[address]:ports'.")
        return host, rest[1:] if rest else None
    if entry.count(":") == 1:
        host, _, ports = entry.partition(":")
        return host, ports
    return entry, None


def _parse_entry(entry: str) -> AllowedEntry:
    host, port_text = _split_ports(entry)
    ports = None if port_text is None else PortRange.parse(port_text, entry)
    try:
        network: IpNetwork | None = ipaddress.ip_network(host, strict=False)
    except ValueError:
        network = None
    name = None if network is not None else host.lower().rstrip(".")
    if name is not None and not _HOST_NAME.match(name):
        raise AllowedHostsInvalid(
            f"RESPONSES_OUTBOUND_ALLOWED_HOSTS: '{entry}' is not a host name, an IP or a CIDR (an IPv6 one with ports "
            "goes in brackets: '[::1]:8080')."
        )
    only_loopback = (name in LOOPBACK_NAMES) or (
        network is not None
        and any(network.version == loop.version and network.subnet_of(loop) for loop in _LOOPBACK_NETWORKS)  # type: ignore[arg-type]
    )
    if ports is None and only_loopback:
        raise AllowedHostsInvalid(
            f"RESPONSES_OUTBOUND_ALLOWED_HOSTS: '{entry}' is the server's own machine, and a bare entry would let "
            f"any client reach every port on it (this API, its database): name the ports, '{entry}:8080', a range "
            f"'{entry}:8000-8100', or '{entry}:*' to allow every port knowingly."
            if ":" not in host
            else f"RESPONSES_OUTBOUND_ALLOWED_HOSTS: '{entry}' is the server's own machine, and a bare entry would "
            f"let any client reach every port on it (this API, its database): name the ports, '[{host}]:8080', a "
            f"range '[{host}]:8000-8100', or '[{host}]:*' to allow every port knowingly."
        )
    return AllowedEntry(name, network, ports)


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The hosts (and ports) an operator lets the server call although they are not public."""

    entries: tuple[AllowedEntry, ...] = ()

    @classmethod
    def parse(cls, setting: str) -> AllowedHosts:
        """'hooks.internal, 10.0.0.5:8443, 192.168.0.0/16:8000-8100, 127.0.0.1:9000, [::1]:*' -> entries;
        AllowedHostsInvalid for an entry that cannot be used (a bad port, a bare loopback host)."""
        return cls(tuple(_parse_entry(entry) for entry in (part.strip() for part in setting.split(",")) if entry))

    def allows_name(self, host: str, port: int, *, loopback: bool = False) -> bool:
        """An entry names this host and allows this port (a bare one not when the name resolves to loopback)."""
        name = host.lower().rstrip(".")
        loopback = loopback or name in LOOPBACK_NAMES
        return any(entry.name == name and entry.allows_port(port, loopback=loopback) for entry in self.entries)

    def allows_address(self, address: IpAddress, port: int) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        loopback = is_loopback(address)
        return any(
            entry.network is not None
            and address.version == entry.network.version
            and address in entry.network
            and entry.allows_port(port, loopback=loopback)
            for entry in self.entries
        )


def is_public(address: IpAddress) -> bool:
    """Routable on the internet: not private, loopback, link-local (169.254.169.254, the cloud metadata service,
    among them), multicast, reserved or unspecified, judged on the IPv4 address an IPv4-mapped IPv6 one carries."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_unspecified
    )


def literal_address(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: its parts, and the port it goes to."""

    url: SplitResult
    host: str
    port: int


def check_url(url: str, allowed: AllowedHosts) -> Target:
    """What can be told without the network: an http(s) URL with a host, and, when the host is an IP, one the
    server may call. OutboundRefused otherwise."""
    if any(ord(character) < 0x20 or 0x7F <= ord(character) <= 0x9F for character in url):
        # CR/LF would be stored and echoed raw (and, were it ever written into a request line or a log, split it).
        raise OutboundRefused("The URL must not contain control characters (CR, LF, tab...).")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise OutboundRefused("The URL is not valid.") from None
    if parts.scheme not in SCHEMES:
        raise OutboundRefused("The URL must use http or https.")
    host = parts.hostname
    if not host:
        raise OutboundRefused("The URL has no host.")
    if parts.username is not None or parts.password is not None:
        raise OutboundRefused("The URL must not carry credentials.")
    port = port or DEFAULT_PORTS[parts.scheme]
    address = literal_address(host)
    if address is not None and not (is_public(address) or allowed.allows_address(address, port)):
        raise OutboundRefused(f"The URL's address {address} (port {port}) is not public and not in the allowed hosts.")
    return Target(parts, host, port)


async def resolve(target: Target, allowed: AllowedHosts) -> IpAddress:
    """The one address the request will connect to: the host's (resolved once, here), refused when any address the
    name has is not public (a name that points inside the network) unless the host or the address is allowed."""
    literal = literal_address(target.host)
    if literal is not None:
        check_url(target.url.geturl(), allowed)
        return literal
    try:
        found = await asyncio.get_running_loop().getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise OutboundRefused(f"The host {target.host} could not be resolved ({error.strerror or error}).") from None
    addresses = [ipaddress.ip_address(str(entry[4][0]).split("%")[0]) for entry in found]
    if not addresses:
        raise OutboundRefused(f"The host {target.host} has no address.")
    loopback = any(is_loopback(address) for address in addresses)
    if not allowed.allows_name(target.host, target.port, loopback=loopback):
        for address in addresses:
            if not (is_public(address) or allowed.allows_address(address, target.port)):
                raise OutboundRefused(
                    f"The host {target.host} resolves to {address}, which is not public and not in the allowed hosts "
                    f"for port {target.port}."
                )
    return addresses[0]
