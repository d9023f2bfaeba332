"""Kubernetes' CEL IP and CIDR libraries (k8s.io/apiserver pkg/cel/library/ip.go, cidr.go).

Network device attributes (dranet publishes ``ipv4: 192.168.155.224/19``) can be checked with
``cidr(...)``/``ip(...)``. Parsing follows Go's ``net/netip``: no zones, no IPv4-mapped IPv6, no
leading zeros; a CIDR keeps its host bits until ``masked()``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final

from ..errors import EvalError
from ..types import BOOL, INT, STRING, Type
from ..values import register_strict_equality
from . import register

__all__ = ["CIDR", "IP", "parse_cidr", "parse_ip"]

IP_TYPE: Final = Type("net.IP")
CIDR_TYPE: Final = Type("net.CIDR")
_PREFIX = re.compile(r"(0|[1-9][0-9]{0,2})")
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class IP:
    """A CEL ``net.IP`` value."""

    __slots__ = ("addr",)
    cel_type_name = "net.IP"

    def __init__(self, addr: _Address) -> None:
        self.addr = addr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and other.addr == self.addr

    def __hash__(self) -> int:
        return hash(self.addr)

    def __repr__(self) -> str:
        return f"ip({str(self.addr)!r})"


class CIDR:
    """A CEL ``net.CIDR`` value: an address (host bits kept) and a prefix length."""

    __slots__ = ("addr", "bits")
    cel_type_name = "net.CIDR"

    def __init__(self, addr: _Address, bits: int) -> None:
        self.addr = addr
        self.bits = bits

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network((self.addr, self.bits), strict=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (other.addr, other.bits) == (self.addr, self.bits)

    def __hash__(self) -> int:
        return hash((self.addr, self.bits))

    def __str__(self) -> str:
        return f"{self.addr}/{self.bits}"

    def __repr__(self) -> str:
        return f"cidr({str(self)!r})"


register_strict_equality(IP, CIDR)


def parse_ip(text: str) -> IP:
    if "%" in text:
        raise EvalError(f"IP address {text!r} with zone value is not allowed")
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        raise EvalError(f"IP Address {text!r} parse error during conversion from string") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise EvalError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return IP(addr)


def parse_cidr(text: str) -> CIDR:
    address, sep, bits = text.partition("/")
    if not sep or not _PREFIX.fullmatch(bits) or "%" in address:
        raise EvalError(f"network address parse error during conversion from string: invalid prefix {text!r}")
    try:
        addr = ipaddress.ip_address(address)
    except ValueError:
        raise EvalError(f"network address parse error during conversion from string: {text!r}") from None
    if int(bits) > addr.max_prefixlen:
        raise EvalError(
            f"network address parse error during conversion from string: prefix length out of range {text!r}"
        )
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise EvalError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return CIDR(addr, int(bits))


def _valid(parse: object, text: str) -> bool:
    try:
        parse(text)  # type: ignore[operator]
    except EvalError:
        return False
    return True


def _is_canonical(text: str) -> bool:
    return str(parse_ip(text).addr) == text


def _link_local_multicast(ip: IP) -> bool:
    a = ip.addr
    if a.version == 4:
        return a in ipaddress.ip_network("224.0.0.0/24")
    return (int(a) >> 112) & 0xFF0F == 0xFF02


def _global_unicast(ip: IP) -> bool:
    a = ip.addr
    if a.version == 4 and (int(a) == 0 or int(a) == 0xFFFFFFFF):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def _contains_ip(c: CIDR, ip: IP) -> bool:
    return ip.addr.version == c.addr.version and ip.addr in c.network


def _contains_cidr(c: CIDR, other: CIDR) -> bool:
    if c.addr.version != other.addr.version:
        return False
    return c.network.overlaps(other.network) and c.bits <= other.bits


register("ip", "string_to_ip", False, (STRING,), IP_TYPE)(parse_ip)
register("isIP", "is_ip", False, (STRING,), BOOL)(lambda s: _valid(parse_ip, s))
register("ip.isCanonical", "ip_is_canonical", False, (STRING,), BOOL)(_is_canonical)
register("family", "ip_family", True, (IP_TYPE,), INT)(lambda ip: ip.addr.version)
register("isUnspecified", "ip_is_unspecified", True, (IP_TYPE,), BOOL)(lambda ip: ip.addr.is_unspecified)
register("isLoopback", "ip_is_loopback", True, (IP_TYPE,), BOOL)(lambda ip: ip.addr.is_loopback)
register("isLinkLocalMulticast", "ip_is_link_local_multicast", True, (IP_TYPE,), BOOL)(_link_local_multicast)
register("isLinkLocalUnicast", "ip_is_link_local_unicast", True, (IP_TYPE,), BOOL)(
    lambda ip: ip.addr.is_link_local
)
register("isGlobalUnicast", "ip_is_global_unicast", True, (IP_TYPE,), BOOL)(_global_unicast)
register("string", "ip_to_string", False, (IP_TYPE,), STRING)(lambda ip: str(ip.addr))
register("cidr", "string_to_cidr", False, (STRING,), CIDR_TYPE)(parse_cidr)
register("isCIDR", "is_cidr", False, (STRING,), BOOL)(lambda s: _valid(parse_cidr, s))
register("containsIP", "cidr_contains_ip_string", True, (CIDR_TYPE, STRING), BOOL)(
    lambda c, s: _contains_ip(c, parse_ip(s))
)
register("containsIP", "cidr_contains_ip_ip", True, (CIDR_TYPE, IP_TYPE), BOOL)(_contains_ip)
register("containsCIDR", "cidr_contains_cidr_string", True, (CIDR_TYPE, STRING), BOOL)(
    lambda c, s: _contains_cidr(c, parse_cidr(s))
)
register("containsCIDR", "cidr_contains_cidr", True, (CIDR_TYPE, CIDR_TYPE), BOOL)(_contains_cidr)
register("ip", "cidr_ip", True, (CIDR_TYPE,), IP_TYPE)(lambda c: IP(c.addr))
register("prefixLength", "cidr_prefix_length", True, (CIDR_TYPE,), INT)(lambda c: c.bits)
register("masked", "cidr_masked", True, (CIDR_TYPE,), CIDR_TYPE)(
    lambda c: CIDR(c.network.network_address, c.bits)
)
register("string", "cidr_to_string", False, (CIDR_TYPE,), STRING)(str)
