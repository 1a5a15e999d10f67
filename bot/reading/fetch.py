"""The guarded HTTP fetcher: links users send and pages the model asks to read.

A user (or a page, through a redirect, or the model) chooses the URL, and the bot
runs beside the operator's Redis, model server and cloud metadata service. So no
fetch may reach them (server-side request forgery):

- only ``http`` and ``https``; credentials in the URL are dropped;
- the host is resolved first and the fetch refused when ANY of its addresses is
  loopback, private, link-local, multicast, reserved, unspecified or otherwise not
  global (an IPv4 address inside an IPv6 one is checked as itself), unless it lies in
  ``URL_FETCH_ALLOW``; cloud metadata addresses are refused even then;
- the connection goes to exactly the addresses that were checked: the connector's
  resolver (:class:`_Pinned`) answers only for hosts checked in this fetch, with their
  checked addresses, so nothing resolves a name twice (DNS rebinding), while the URL
  keeps its host name for the Host header and TLS (SNI and certificate);
- redirects are followed by hand, at most three, each checked like the first URL;
- no cookies, no proxy or netrc from the environment, a fixed User-Agent;
- at most ``URL_FETCH_MAX_BYTES`` read (streamed, then the connection is dropped) and
  10 s for the whole fetch, redirects included.

Every failure is a :class:`FetchError` with a short reason for the model ("could not
be read (the address 10.0.0.5 is private)").
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port → its addresses (injectable: tests fake a host resolving to 10.x).
Resolve = Callable[[str, int], Awaitable[list[IPAddress]]]
FetchKind = Literal[
    "bad_url", "refused", "dns", "connect", "tls", "timeout", "redirects", "status"
]  # fmt: skip

USER_AGENT = "replychain/0.1 (Telegram chat bot; reads links its users send)"
ACCEPT = "text/html,application/xhtml+xml,application/pdf;q=0.9,text/*;q=0.8,*/*;q=0.5"
#: Cloud metadata services: AWS, GCP, Azure, OpenStack (169.254.169.254 and AWS's
#: IPv6 one), ECS task metadata, Alibaba. Never fetched, whatever URL_FETCH_ALLOW says.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200")
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65_536


class FetchError(Exception):
    """A URL that may not, or could not, be fetched; ``str()`` is the short reason."""

    def __init__(self, kind: FetchKind, reason: str) -> None:
        super().__init__(reason)
        self.kind: FetchKind = kind
        self.reason = reason

    def describe(self) -> str:
        """For the model: "could not be read (the address 10.0.0.5 is private)"."""
        return f"could not be read ({self.reason})"


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    #: URL_FETCH_ALLOW: networks a fetch may reach although not public.
    allow: tuple[Network, ...] = ()
    #: URL_FETCH_MAX_BYTES: the most bytes read of a response (after decompression).
    max_bytes: int = 2 * 1024 * 1024
    #: Seconds for one fetch, redirects included.
    timeout: float = 10.0
    max_redirects: int = 3


@dataclass(frozen=True, slots=True)
class Fetched:
    #: The URL the body came from (after redirects).
    url: str
    status: int
    #: Lower case, without parameters ("" when the server named none).
    content_type: str
    charset: str | None
    body: bytes
    #: True when the response was longer than ``max_bytes`` and cut there.
    truncated: bool


def refusal(address: IPAddress, allow: tuple[Network, ...] = ()) -> str | None:
    """Why ``address`` may not be fetched, or ``None`` when it may."""
    if address in METADATA:
        return f"{address} is a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in allow):
        return None
    for candidate in (address, *_embedded(address)):
        if candidate in METADATA:
            return f"{address} is a cloud metadata address"
        for what, flag in (
            ("unspecified", candidate.is_unspecified),
            ("loopback", candidate.is_loopback),
            ("link-local", candidate.is_link_local),
            ("multicast", candidate.is_multicast),
            ("private", candidate.is_private),
            ("reserved", candidate.is_reserved),
        ):
            if flag:
                return f"the address {address} is {what}"
        if not candidate.is_global:
            return f"the address {address} is not public"
    return None


def _embedded(address: IPAddress) -> list[IPAddress]:
    """IPv4 addresses an IPv6 address carries to a gateway: 6to4, Teredo, NAT64."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found: list[IPAddress] = []
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.append(address.teredo[1])
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


async def system_resolve(host: str, port: int) -> list[IPAddress]:
    """The host's addresses as this machine resolves them (getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0])) for info in infos))


class _Pinned(AbstractResolver):
    """aiohttp's resolver for one fetch: a checked host's checked addresses, and for any
    other host an error (nothing is resolved here, so nothing is resolved twice)."""

    def __init__(self) -> None:
        self.pins: dict[str, list[IPAddress]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = self.pins.get(host)
        if not addresses:
            raise OSError(f"{host} was not checked")
        return [
            ResolveResult(
                hostname=host, host=str(a), port=port, proto=0, flags=socket.AI_NUMERICHOST,
                family=socket.AF_INET6 if a.version == 6 else socket.AF_INET,
            )
            for a in addresses
        ]  # fmt: skip

    async def close(self) -> None:
        return None


class Fetcher:
    """Fetches one URL at a time under :class:`FetchPolicy`; holds no connection."""

    def __init__(
        self,
        policy: FetchPolicy = FetchPolicy(),
        *,
        resolve: Resolve = system_resolve,
        tls: ssl.SSLContext | bool = True,
    ) -> None:
        self.policy = policy
        self._resolve = resolve
        #: Certificate checking: True (the system's CAs), or a context (tests).
        self._tls = tls

    async def fetch(self, url: str) -> Fetched:
        """The response to ``url`` (after at most ``max_redirects`` checked redirects);
        raises :class:`FetchError`."""
        try:
            async with asyncio.timeout(self.policy.timeout):
                return await self._fetch(_parse(url))
        except TimeoutError:
            raise FetchError("timeout", f"no answer within {self.policy.timeout:g} s") from None
        except aiohttp.ClientSSLError as exc:
            raise FetchError("tls", "its TLS certificate could not be verified") from exc
        except aiohttp.ClientConnectorError as exc:
            raise FetchError("connect", "the server could not be reached") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise FetchError("connect", "the connection failed") from exc

    async def _fetch(self, current: URL) -> Fetched:
        pinned = _Pinned()
        connector = aiohttp.TCPConnector(
            resolver=pinned, use_dns_cache=False, ssl=self._tls, limit=1, force_close=True
        )
        async with aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": USER_AGENT, "Accept": ACCEPT},
            trust_env=False,
        ) as session:
            for _hop in range(self.policy.max_redirects + 1):
                host = current.raw_host or ""
                pinned.pins[host] = await self.check(host, current.port or 0)
                async with session.get(current, allow_redirects=False) as response:
                    if response.status in _REDIRECTS and "Location" in response.headers:
                        current = _parse(_joined(current, response.headers["Location"]))
                        continue
                    if not 200 <= response.status < 300:
                        raise FetchError("status", f"the server answered HTTP {response.status}")
                    body, truncated = await _read(response, self.policy.max_bytes)
                    return Fetched(
                        url=str(current),
                        status=response.status,
                        content_type=response.content_type.lower(),
                        charset=response.charset,
                        body=body,
                        truncated=truncated,
                    )
        raise FetchError("redirects", f"more than {self.policy.max_redirects} redirects")

    async def check(self, host: str, port: int) -> list[IPAddress]:
        """The host's addresses, each allowed; raises :class:`FetchError` when one is not."""
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                addresses = await self._resolve(host, port)
            except (OSError, UnicodeError) as exc:
                raise FetchError("dns", f"the host {host} was not found") from exc
        if not addresses:
            raise FetchError("dns", f"the host {host} was not found")
        for address in addresses:
            why = refusal(address, self.policy.allow)
            if why is not None:
                raise FetchError("refused", why)
        return addresses


def _parse(url: str) -> URL:
    """An http(s) URL with a host, without credentials or fragment."""
    try:
        parsed = URL(url.strip())
    except (ValueError, TypeError):
        raise FetchError("bad_url", "it is not a valid URL") from None
    if parsed.scheme not in ("http", "https"):
        raise FetchError("bad_url", "only http and https links are read")
    if not parsed.raw_host:
        raise FetchError("bad_url", "it names no host")
    return parsed.with_user(None).with_fragment(None)


def _joined(base: URL, location: str) -> str:
    """A redirect's target, relative to the URL it came from."""
    try:
        return str(base.join(URL(location)))
    except (ValueError, TypeError):
        raise FetchError("bad_url", "it redirects to an invalid URL") from None


async def _read(response: aiohttp.ClientResponse, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the body; True when there was more."""
    body = bytearray()
    try:
        async for chunk in response.content.iter_chunked(_CHUNK):
            if len(body) + len(chunk) > limit:
                body += chunk[: limit - len(body)]
                return bytes(body), True
            body += chunk
    except aiohttp.ClientPayloadError as exc:
        raise FetchError("connect", "the response broke off") from exc
    return bytes(body), False
