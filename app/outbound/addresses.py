"""Which URLs and addresses the server may call: http(s) only, public addresses only unless the operator allows the
host (RESPONSES_OUTBOUND_ALLOWED_HOSTS: host names, IPs, CIDRs), checked on the address a name resolves to."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}


class OutboundRefused(ValueError):
    """A URL or address this server will not call (the message says why; it names no secret)."""


@dataclass(frozen=True, slots=True)
class AllowedHosts:
    """The hosts an operator lets the server call although they are not public."""

    names: frozenset[str] = frozenset()
    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def parse(cls, setting: str) -> AllowedHosts:
        """'name, 10.0.0.5, 192.168.0.0/16, ::1' -> names and networks (an IP is a network of one address)."""
        names: set[str] = set()
        networks: list[IpNetwork] = []
        for entry in (part.strip() for part in setting.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.add(entry.lower().rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def allows_name(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.names

    def allows_address(self, address: IpAddress) -> bool:
        return any(address in network for network in self.networks)


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
    address = literal_address(host)
    if address is not None and not (is_public(address) or allowed.allows_address(address)):
        raise OutboundRefused(f"The URL's address {address} is not public and not in the allowed hosts.")
    return Target(parts, host, port or DEFAULT_PORTS[parts.scheme])


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
    if not allowed.allows_name(target.host):
        for address in addresses:
            if not (is_public(address) or allowed.allows_address(address)):
                raise OutboundRefused(
                    f"The host {target.host} resolves to {address}, which is not public and not in the allowed hosts."
                )
    return addresses[0]
