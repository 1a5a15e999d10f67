"""The guarded fetcher and pages (bot/reading/fetch.py, pages.py) against a loopback page
server the tests start (tests/fakes/web.py), which counts every request it gets: a
refused fetch must never reach it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bot.reading.fetch import (
    USER_AGENT,
    Fetcher,
    FetchError,
    FetchPolicy,
    IPAddress,
    refusal,
)
from bot.reading.pages import first_links, read_page

from .fakes.web import ARTICLE_TEXT, PageServer

LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)


@pytest.fixture
async def server() -> AsyncIterator[PageServer]:
    async with PageServer() as running:
        yield running


class FakeDNS:
    """An injected resolver (no /etc/hosts): each name's addresses, every question
    counted; ``later`` answers a name differently from its second question on, as a
    rebinding DNS server would."""

    def __init__(self, later: dict[str, list[str]] | None = None, **names: str | list[str]) -> None:
        self.names = {
            k.replace("_", "."): [v] if isinstance(v, str) else v for k, v in names.items()
        }
        self.later = later or {}
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        again = host in self.asked
        self.asked.append(host)
        answers = self.later.get(host) if again else None
        answers = answers or self.names.get(host)
        if answers is None:
            raise OSError(f"{host}: no such host")
        return [ipaddress.ip_address(a) for a in answers]


def fetcher(*allow: str, dns: FakeDNS | None = None, **policy: float) -> Fetcher:
    networks = tuple(ipaddress.ip_network(a) for a in allow)
    settings = FetchPolicy(allow=networks, **policy)  # type: ignore[arg-type]
    return Fetcher(settings, resolve=dns) if dns is not None else Fetcher(settings)


async def refused(fetch: Fetcher, url: str, kind: str = "refused") -> str:
    with pytest.raises(FetchError) as caught:
        await fetch.fetch(url)
    assert caught.value.kind == kind, caught.value.reason
    return caught.value.describe()


async def test_an_allowed_page_is_read_as_its_main_text(server: PageServer) -> None:
    page = await read_page(fetcher("127.0.0.1/32"), server.url("/article"), max_tokens=30_000)
    assert page.unread is None and page.title == "Keeper's log"
    assert ARTICLE_TEXT.strip() in page.text
    for noise in ("TRACKING_SCRIPT", "SITE_NAVIGATION", "FOOTER_COPYRIGHT", "color: red"):
        assert noise not in page.text
    quoted = page.as_quote()
    assert f"web page {server.url('/article')} “Keeper's log”>>>" in quoted.splitlines()[0]
    seen = server.requests[-1]
    assert seen.headers["User-Agent"] == USER_AGENT
    assert "Cookie" not in seen.headers and "Authorization" not in seen.headers


async def test_without_the_allow_list_loopback_is_refused_before_any_request(
    server: PageServer,
) -> None:
    guarded = fetcher()
    why = await refused(guarded, server.url("/article"))
    assert why == "could not be read (the address 127.0.0.1 is loopback)"
    await refused(guarded, server.url("/article", host="localhost"))  # the system's resolver
    await refused(guarded, server.url("/article", host="[::1]"))
    await refused(guarded, server.url("/article", host="0.0.0.0"))
    await refused(guarded, server.url("/article", host="2130706433"))  # 127.0.0.1, as a number
    await refused(guarded, server.url("/article", host="[::ffff:127.0.0.1]"))
    page = await read_page(guarded, server.url("/article"), max_tokens=1000)
    assert page.unread == "could not be read (the address 127.0.0.1 is loopback)"
    assert page.as_quote() == f"Link {server.url('/article')}: {page.unread}."
    assert server.hits() == 0


async def test_a_host_resolving_to_a_private_address_is_refused(server: PageServer) -> None:
    dns = FakeDNS(intranet_example="10.1.2.3")
    why = await refused(fetcher(dns=dns), "http://intranet.example/admin")
    assert why == "could not be read (the address 10.1.2.3 is private)"
    assert dns.asked == ["intranet.example"]
    # ANY address: an allowed one does not let a private one beside it through
    mixed = FakeDNS(mixed_example=["127.0.0.1", "10.0.0.9"])
    await refused(fetcher("127.0.0.1/32", dns=mixed), f"http://mixed.example:{server.port}/article")
    await refused(fetcher(dns=FakeDNS()), "http://nowhere.example/", kind="dns")
    assert server.hits() == 0


async def test_cloud_metadata_is_never_fetched(server: PageServer) -> None:
    everything = fetcher("0.0.0.0/0", "::/0")
    why = await refused(everything, "http://169.254.169.254/latest/meta-data/")
    assert why == "could not be read (169.254.169.254 is a cloud metadata address)"
    await refused(everything, "http://[fd00:ec2::254]/latest/meta-data/")
    dns = FakeDNS(metadata_google_internal="169.254.169.254")
    await refused(fetcher(dns=dns), "http://metadata.google.internal/computeMetadata/v1/")
    assert server.hits() == 0


def test_the_address_rules() -> None:
    def why(address: str, *allow: str) -> str | None:
        networks = tuple(ipaddress.ip_network(a) for a in allow)
        return refusal(ipaddress.ip_address(address), networks)

    assert why("93.184.216.34") is None and why("2606:2800:220:1::1") is None
    for address in (
        "127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.1.1", "100.64.0.1",
        "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1",
        "fc00::1", "ff02::1", "::ffff:10.0.0.1", "2002:7f00:1::", "64:ff9b::a00:1",
        "100.100.100.200",
    ):  # fmt: skip
        assert why(address) is not None, address
    assert why("10.0.0.1", "10.0.0.0/8") is None
    assert why("::ffff:127.0.0.1", "127.0.0.1/32") is None  # the same address, mapped
    assert why("169.254.169.254", "169.254.0.0/16") is not None


async def test_the_connection_goes_to_the_checked_address_with_the_host_name_kept(
    server: PageServer,
) -> None:
    """The name is resolved once; a resolver that would answer differently the second
    time (DNS rebinding) is never asked again, and the request still names the host."""
    dns = FakeDNS({"news.example": ["10.9.9.9"]}, news_example="127.0.0.1")
    fetched = await fetcher("127.0.0.1/32", dns=dns).fetch(
        f"http://news.example:{server.port}/article"
    )
    assert fetched.status == 200 and b"keeper" in fetched.body
    assert dns.asked == ["news.example"]
    assert server.requests[-1].headers["Host"] == f"news.example:{server.port}"


async def test_redirects_are_checked_again(server: PageServer) -> None:
    async with PageServer("127.0.0.2") as origin:  # allowed; it redirects to 127.0.0.1
        allowed = fetcher("127.0.0.2/32")
        for target in (
            server.url("/article"),
            server.url("/article", host="localhost"),
            "http://169.254.169.254/latest/",
        ):
            origin.away = target
            await refused(allowed, origin.url("/away"))
        origin.away = "file:///etc/passwd"
        assert "only http and https" in await refused(allowed, origin.url("/away"), "bad_url")
        origin.away = "http://[::1"
        assert "invalid URL" in await refused(allowed, origin.url("/away"), "bad_url")
        assert origin.hits("/away") == 5
        fetched = await allowed.fetch(origin.url("/hop/2"))  # three redirects: read
        assert fetched.url == origin.url("/article")
        await refused(allowed, origin.url("/hop/3"), kind="redirects")
    assert server.hits() == 0


async def test_no_cookies_and_no_credentials_are_sent(server: PageServer) -> None:
    guarded = fetcher("127.0.0.1/32")
    await guarded.fetch(server.url("/cookie"))
    assert [s.path for s in server.requests] == ["/cookie", "/article"]
    assert "Cookie" not in server.requests[-1].headers
    await guarded.fetch(server.url("/article").replace("://", "://user:password@"))
    assert "Authorization" not in server.requests[-1].headers


async def test_at_most_max_bytes_are_read(server: PageServer) -> None:
    server.big = b"<html><body><article><p>" + b"word " * 600_000 + b"</p></article></body></html>"
    small = fetcher("127.0.0.1/32", max_bytes=100_000)
    fetched = await small.fetch(server.url("/big"))
    assert fetched.truncated and len(fetched.body) == 100_000
    page = await read_page(small, server.url("/big"), max_tokens=30_000)
    assert page.cut_at == 100_000 and "only its first 100,000 bytes were fetched" in page.as_quote()
    started = time.perf_counter()
    endless = await small.fetch(server.url("/endless"))  # a body that never ends
    assert endless.truncated and len(endless.body) == 100_000
    assert time.perf_counter() - started < 2


async def test_one_fetch_has_a_time_limit(server: PageServer) -> None:
    started = time.perf_counter()
    why = await refused(fetcher("127.0.0.1/32", timeout=0.5), server.url("/slow"), "timeout")
    assert why == "could not be read (no answer within 0.5 s)"
    assert time.perf_counter() - started < 2


async def test_what_is_not_a_page(server: PageServer) -> None:
    guarded = fetcher("127.0.0.1/32")
    pdf = await read_page(guarded, server.url("/report.pdf"), max_tokens=1000)
    assert pdf.title == "report.pdf" and "the dam holds" in pdf.text and "river fell" in pdf.text
    sniffed = await read_page(guarded, server.url("/download"), max_tokens=1000)
    assert "the minutes of the meeting" in sniffed.text  # a PDF by its bytes, not its type
    png = await read_page(guarded, server.url("/photo.png"), max_tokens=1000)
    assert png.unread == "not read: it is image/png" and not png.text
    missing = await read_page(guarded, server.url("/missing"), max_tokens=1000)
    assert missing.unread == "could not be read (the server answered HTTP 404)"
    for url in ("ftp://example.org/x", "javascript:alert(1)", "http:///nohost"):
        assert (await read_page(guarded, url, max_tokens=1000)).unread is not None


def _certificate(tmp: Path, name: str) -> Path:
    """A self-signed certificate for ``name`` (its own CA), with its key, as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = tmp / f"{name}.pem"
    path.write_bytes(
        certificate.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


async def test_https_names_the_host_to_tls_while_connecting_to_the_checked_address(
    tmp_path: Path,
) -> None:
    pem = _certificate(tmp_path, "secure.example")
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(pem)
    names: list[str | None] = []
    serving.sni_callback = lambda _socket, name, _context: names.append(name)
    trusting = ssl.create_default_context(cafile=str(pem))
    dns = FakeDNS(secure_example="127.0.0.1", other_example="127.0.0.1")
    guarded = Fetcher(FetchPolicy(allow=LOOPBACK), resolve=dns, tls=trusting)
    async with PageServer(tls=serving) as secure:
        fetched = await guarded.fetch(secure.url("/article", host="secure.example"))
        assert fetched.status == 200 and names == ["secure.example"]
        why = await refused(guarded, secure.url("/article", host="other.example"), "tls")
        assert why == "could not be read (its TLS certificate could not be verified)"


def test_first_links_of_a_message() -> None:
    text = (
        "Compare https://example.org/a. and (https://en.wikipedia.org/wiki/Python_(language)), "
        "then http://example.net/x?y=1&z=2, again https://example.org/a and "
        "https://fourth.example/ — also ftp://no.example and www.no.example."
    )
    assert first_links(text, 3) == [
        "https://example.org/a",
        "https://en.wikipedia.org/wiki/Python_(language)",
        "http://example.net/x?y=1&z=2",
    ]
    assert first_links(text, 10)[-1] == "https://fourth.example/"
    assert first_links(text, 0) == [] and first_links("no links here", 3) == []
    assert first_links("«https://example.org/»", 3) == ["https://example.org/"]
    assert first_links("HTTPS://EXAMPLE.ORG/Path", 3) == ["HTTPS://EXAMPLE.ORG/Path"]
