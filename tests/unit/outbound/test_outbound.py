"""Outbound safety: only http(s), only public addresses unless allowed (names resolving inside the network
included), the connection made to the address checked, no redirect followed, a bounded time and answer."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.outbound import addresses
from app.outbound.addresses import AllowedHosts, AllowedHostsInvalid, OutboundRefused, check_url, is_public, resolve
from app.outbound.client import OutboundFailed, post
from app.testing.receiver import free_port, running_receiver

NOBODY = AllowedHosts()
LOOPBACK = AllowedHosts.parse("127.0.0.1:*")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/hook",
        "file:///etc/passwd",
        "gopher://example.com/",
        "http:///nohost",
        "https://",
        "not a url",
        "http://user:pass@example.com/",
        "http://127.0.0.1/hook",
        "http://127.1.2.3:8080/",
        "http://10.0.0.1/",
        "http://172.16.5.5/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://[::1]/",
        "http://[::]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[ff02::1]/",
        "https://example.com/hook\r\nX-Injected: 1",
        "https://example.com/\nhook",
        "https://exa\tmple.com/",
        "https://example.com/\x00",
        "https://example.com/\x85",
    ],
)
def test_urls_that_can_never_be_delivered_to_are_refused(url: str) -> None:
    with pytest.raises(OutboundRefused):
        check_url(url, NOBODY)


@pytest.mark.parametrize(
    "url", ["https://example.com/hook", "http://93.184.216.34:8080/x?y=1", "https://[2606:4700::1111]/"]
)
def test_public_urls_pass_the_static_check(url: str) -> None:
    check_url(url, NOBODY)


def test_the_allowed_hosts_setting_takes_names_ips_and_cidrs_with_their_ports() -> None:
    allowed = AllowedHosts.parse(
        " hooks.internal , 127.0.0.1:9000, 10.1.0.0/16, 192.168.0.0/16:8000-8100, [::1]:*, fd00::/8, other:443 ,"
    )
    assert allowed.allows_name("HOOKS.internal.", 5432) and not allowed.allows_name("other.internal", 443)
    assert allowed.allows_name("other", 443) and not allowed.allows_name("other", 80)
    check_url("http://127.0.0.1:9000/", allowed)
    check_url("http://10.1.200.3/", allowed)
    check_url("http://10.1.200.3:5432/", allowed)  # a bare entry off this machine: every port, as before
    check_url("http://192.168.7.7:8100/", allowed)
    check_url("http://[::1]:6379/", allowed)
    check_url("http://[fd00::5]:22/", allowed)
    check_url("http://[::ffff:127.0.0.1]:9000/", allowed)  # an IPv4-mapped address is its IPv4 one
    for refused in (
        "http://10.2.0.1/",
        "http://127.0.0.1:9001/",
        "http://127.0.0.1/",
        "http://[::ffff:127.0.0.1]:9001/",
        "http://192.168.7.7:8101/",
        "http://192.168.7.7/",
    ):
        with pytest.raises(OutboundRefused, match="not public"):
            check_url(refused, allowed)
    assert is_public(addresses.literal_address("8.8.8.8"))  # type: ignore[arg-type]


def test_a_bare_entry_never_opens_this_machine() -> None:
    """The hole: allowing 127.0.0.1 for one receiver let a tenant aim at any local port (this API, a database).
    A bare entry wider than loopback (0.0.0.0/0, a name) still reaches no loopback or unspecified address."""
    everywhere = AllowedHosts.parse("0.0.0.0/0, ::/0")
    check_url("http://10.0.0.1:5432/", everywhere)
    for url in ("http://127.0.0.1:8080/", "http://0.0.0.0:8080/", "http://[::1]:8080/", "http://[::]:80/"):
        with pytest.raises(OutboundRefused, match="not public"):
            check_url(url, everywhere)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("127.0.0.1", r"'127\.0\.0\.1' is the server's own machine.*'127\.0\.0\.1:8080'.*'127\.0\.0\.1:\*'"),
        ("hooks, 127.0.0.0/8", "'127.0.0.0/8' is the server's own machine"),
        ("::1", r"'\[::1\]:8080'"),
        ("localhost", "'localhost' is the server's own machine"),
        ("hooks:0", "no valid ports"),
        ("hooks:9-8", "no valid ports"),
        ("hooks:http", "no valid ports"),
        ("::1:*", r"in brackets: '\[::1\]:8080'"),
        ("[::1]8080", "is not"),
        ("a host", "is not a host name"),
    ],
)
def test_an_allowed_hosts_setting_that_cannot_be_used_says_how_to_fix_it(setting: str, message: str) -> None:
    with pytest.raises(AllowedHostsInvalid, match=message):
        AllowedHosts.parse(setting)


async def test_names_resolving_to_private_addresses_are_refused_unless_allowed() -> None:
    target = check_url("http://localhost:8080/hook", NOBODY)  # a name: refused only once resolved
    with pytest.raises(OutboundRefused, match=r"resolves to 127\.0\.0\.1"):
        await resolve(target, NOBODY)
    assert str(await resolve(target, AllowedHosts.parse("localhost:*"))) in ("127.0.0.1", "::1")
    assert str(await resolve(target, AllowedHosts.parse("127.0.0.0/8:8080, [::1]:8080"))) in ("127.0.0.1", "::1")
    # Loopback reached through a name is held to the same rule: only an entry that names the port opens it.
    for setting in ("localhost:9000", "127.0.0.0/8:9000, [::1]:9000", "0.0.0.0/0, ::/0"):
        with pytest.raises(OutboundRefused, match="not in the allowed hosts for port 8080"):
            await resolve(target, AllowedHosts.parse(setting))


async def test_a_bare_name_that_resolves_to_loopback_opens_no_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator allowed `hooks.internal` (every port, off this machine); a name that points at 127.0.0.1 is held
    to the loopback rule: refused unless an entry names its port."""
    real = asyncio.get_running_loop().getaddrinfo

    async def lookup(host: str, port: int, **kwargs: object) -> Sequence[tuple[object, ...]]:
        if host == "hooks.internal":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return await real(host, port, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", lookup)
    target = check_url("http://hooks.internal:5432/", AllowedHosts.parse("hooks.internal"))
    with pytest.raises(OutboundRefused, match=r"resolves to 127\.0\.0\.1"):
        await resolve(target, AllowedHosts.parse("hooks.internal"))
    assert str(await resolve(target, AllowedHosts.parse("hooks.internal:5432"))) == "127.0.0.1"


async def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_connected_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rebinding name: the first lookup says loopback (allowed here), any later one a metadata address. The
    request goes to the first answer, with the name in its Host header."""
    lookups: list[str] = []
    real = asyncio.get_running_loop().getaddrinfo

    async def rebinding(host: str, port: int, **kwargs: object) -> Sequence[tuple[object, ...]]:
        if host != "rebind.test":
            return await real(host, port, **kwargs)  # type: ignore[arg-type]
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "169.254.169.254"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", rebinding)
    with running_receiver() as receiver:
        answer = await post(f"http://rebind.test:{receiver.port}/hook", b"{}", {}, allowed=LOOPBACK)
    assert answer.status_code == 200 and lookups == ["rebind.test"]
    assert receiver.requests[0].headers["host"] == f"rebind.test:{receiver.port}"


async def test_redirects_are_not_followed() -> None:
    with running_receiver() as target, running_receiver() as redirector:
        redirector.status, redirector.location = 307, target.url
        answer = await post(redirector.url, b'{"a":1}', {"x-test": "1"}, allowed=LOOPBACK)
    assert answer.status_code == 307
    assert len(redirector.requests) == 1 and target.requests == []
    assert redirector.requests[0].body == b'{"a":1}' and redirector.requests[0].headers["x-test"] == "1"


async def test_nothing_of_the_answer_but_its_status_is_kept() -> None:
    with running_receiver() as receiver:
        receiver.status, receiver.body = 500, b"secret banner " * 100
        answer = await post(receiver.url, b"{}", {}, allowed=LOOPBACK)
    assert answer == type(answer)(500) and answer.reason == "Internal Server Error"
    assert "banner" not in repr(answer)


async def test_a_peer_that_is_not_http_is_named_by_kind_not_quoted() -> None:
    """A local service that answers with its own banner (Redis, a database): the failure quotes none of it."""

    async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"-ERR secret-banner unknown command\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(banner, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(OutboundFailed) as failed:
            await post(f"http://127.0.0.1:{port}/", b"{}", {}, allowed=LOOPBACK)
    assert "not valid HTTP" in str(failed.value) and "secret" not in str(failed.value)


async def test_no_answer_within_the_time_limit_or_nobody_listening_is_a_failure() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(OutboundFailed, match=r"No answer within 0\.3 s"):
            await post(f"http://127.0.0.1:{silent.getsockname()[1]}/", b"{}", {}, allowed=LOOPBACK, timeout_s=0.3)
    with pytest.raises(OutboundFailed, match="ConnectError"):
        await post(f"http://127.0.0.1:{free_port()}/", b"{}", {}, allowed=LOOPBACK)


async def test_post_refuses_what_the_checks_refuse() -> None:
    with running_receiver() as receiver:
        with pytest.raises(OutboundRefused):
            await post(receiver.url, b"{}", {}, allowed=NOBODY)
        with pytest.raises(OutboundRefused):
            await post(f"http://localhost:{receiver.port}/hook", b"{}", {}, allowed=NOBODY)
    assert receiver.requests == []


def _self_signed(name: str, directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


async def test_https_goes_to_the_checked_address_with_the_name_as_sni(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The TLS handshake to the pinned IP names the host (SNI), so that the certificate is checked against the name:
    a self-signed one is refused (certificates are verified), after the server saw the name."""
    cert, key = _self_signed("hooks.test", tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda _socket, name, _context: names.append(name)  # type: ignore[assignment,func-returns-value]
    server = await asyncio.start_server(lambda _reader, writer: writer.close(), "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    real = asyncio.get_running_loop().getaddrinfo

    async def lookup(host: str, port_: int, **kwargs: object) -> Sequence[tuple[object, ...]]:
        if host == "hooks.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port_))]
        return await real(host, port_, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", lookup)
    async with server:
        with pytest.raises(OutboundFailed, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await post(f"https://hooks.test:{port}/hook", b"{}", {}, allowed=LOOPBACK)
    assert names == ["hooks.test"]


@pytest.mark.parametrize("command", [["serve", "--port", "1"], ["worker"]])
def test_a_bare_loopback_entry_stops_the_start_up_in_one_line(
    command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deployment that allowed `127.0.0.1` for one receiver (every port of this machine, before) does not start
    until the entry names its ports; the message says how."""
    from app import cli

    monkeypatch.setenv("RESPONSES_OUTBOUND_ALLOWED_HOSTS", "hooks.internal:443, 127.0.0.1")
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    if command == ["worker"]:
        monkeypatch.setenv("RESPONSES_REDIS_URL", "redis://127.0.0.1:1/0")
    assert cli.main(command) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "RESPONSES_OUTBOUND_ALLOWED_HOSTS: '127.0.0.1'" in line and "'127.0.0.1:8080'" in line


async def test_an_app_with_a_bare_loopback_entry_does_not_start(tmp_path: Path) -> None:
    from app.config import Settings
    from app.main import create_app
    from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", outbound_allowed_hosts="::1", _env_file=None
    )
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    with pytest.raises(AllowedHostsInvalid, match=r"'\[::1\]:\*'"):
        async with app.router.lifespan_context(app):
            pass
