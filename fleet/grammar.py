"""The grammar of spec values that other programs read: addresses, NIDs, NQNs, versions, paths.

Each value here ends up on a command line, in an Ansible variable or in an fstab line on a node,
so a spec field accepts only the language its consumer defines, and strict types keep YAML's
guesses out (`true` is not a count, `"16"` is not a number, `0` is not a network). Each checker
raises ValueError with what is allowed; pydantic prefixes the field's path.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, Strict

# Counts and sizes: a real integer or number, never a bool, a string or NaN/infinity.
StrictCount = Annotated[int, Strict(), Field(gt=0)]
# Nodes in one fleet: the largest GPU clusters built are ~100,000 GPUs (12,500 8-GPU nodes); a
# number far beyond that is a typo or an attack on whatever sizes itself by it.
MAX_NODES = 100_000
NodeCount = Annotated[int, Strict(), Field(gt=0, le=MAX_NODES)]
SpareCount = Annotated[int, Strict(), Field(ge=0, le=MAX_NODES)]
StrictPort = Annotated[int, Strict(), Field(ge=1, le=65535)]
StrictNumber = Annotated[float, Strict(), Field(allow_inf_nan=False)]

# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 253 characters.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_DNS_LENGTH = 253


def is_dns_name(value: str) -> bool:
    # An all-numeric last label would read as a (malformed) IPv4 address, e.g. 10.0.0.256.
    last = value.rstrip(".").rsplit(".", 1)[-1]
    return len(value) <= _DNS_LENGTH and bool(_DNS_NAME.fullmatch(value)) and not last.isdigit()


def is_ip_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _host_address(value: str) -> str:
    if is_ip_address(value) or is_dns_name(value):
        return value
    raise ValueError(
        f"{value!r} is not a host address; allowed: an IPv4 or IPv6 address or an RFC 1123 DNS name"
    )


def _ip_address(value: str) -> str:
    if is_ip_address(value):
        return value
    raise ValueError(f"{value!r} is not an IP address; allowed: an IPv4 or IPv6 address")


HostAddress = Annotated[str, Strict(), AfterValidator(_host_address)]
IpAddress = Annotated[str, Strict(), AfterValidator(_ip_address)]


# Lustre NIDs: <address>@<network><number>. IP networks (tcp, o2ib, efa) take an IPv4 address (not
# IPv6: the mount source joins failover MGS nodes with ':', which an IPv6 address would split);
# the fabric LNDs (kfi, gni, ptl) take a numeric address; `0@lo` is loopback.
# One MGS entry is its node's NIDs joined by commas (several interfaces); the list's entries are
# failover MGS nodes, which Lustre's mount source separates with colons.
_NID = re.compile(r"(?P<addr>[^@\s]+)@(?P<lnd>tcp|o2ib|efa|kfi|gni|ptl|lo)(?P<num>[0-9]{0,5})")
_IP_LNDS = {"tcp", "o2ib", "efa"}


def _is_ipv4(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


def _nid_problem(nid: str) -> str | None:
    m = _NID.fullmatch(nid)
    if m is None:
        return "not <address>@<network>, e.g. 10.0.0.1@tcp or 192.168.1.2@o2ib0"
    addr, lnd = m["addr"], m["lnd"]
    if lnd in _IP_LNDS and not _is_ipv4(addr):
        return f"{lnd} NIDs take an IPv4 address before the @"
    if lnd not in _IP_LNDS and not addr.isdigit():
        return f"{lnd} NIDs take a numeric address before the @"
    return None


def _mgs_nids(value: str) -> str:
    for nid in value.split(","):
        problem = _nid_problem(nid)
        if problem:
            raise ValueError(
                f"{nid!r} is not a Lustre NID: {problem}; one MGS node's NIDs are separated by commas, "
                "failover MGS nodes are separate entries"
            )
    return value


LustreNids = Annotated[str, Strict(), AfterValidator(_mgs_nids)]


# NVMe Qualified Names (NVM Express Base Specification, "NVMe Qualified Names"): UTF-8, at most
# 223 bytes, either nqn.<yyyy-mm>.<reverse domain>[:<name>] or the UUID form below. The name part
# is free text in the standard; here it is limited to printable characters without whitespace,
# quotes, backslashes or Jinja/shell braces, because it is passed to `nvme connect` by Ansible.
NQN_MAX_BYTES = 223
_NQN_DOMAIN = re.compile(
    rf"nqn\.(?P<year>[0-9]{{4}})-(?P<month>[0-9]{{2}})\.(?P<domain>{_LABEL}(?:\.{_LABEL})+)"
    r"(?::(?P<name>.+))?"
)
_NQN_UUID = re.compile(
    r"nqn\.2014-08\.org\.nvmexpress:uuid:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_NQN_FORBIDDEN = set("{}%#$`'\"\\<> ")


def _nqn(value: str) -> str:
    allowed = (
        "allowed: nqn.<yyyy-mm>.<reverse domain>[:<name>] or nqn.2014-08.org.nvmexpress:uuid:<uuid>, "
        f"at most {NQN_MAX_BYTES} bytes"
    )
    if len(value.encode("utf-8")) > NQN_MAX_BYTES:
        raise ValueError(f"NQN is {len(value.encode('utf-8'))} bytes; {allowed}")
    if value.startswith("nqn.2014-08.org.nvmexpress:uuid:"):
        if _NQN_UUID.fullmatch(value):
            return value
        raise ValueError(f"{value!r} is not a UUID NQN; {allowed}")
    m = _NQN_DOMAIN.fullmatch(value)
    if m is None or not 1 <= int(m["month"]) <= 12 or _NQN_FORBIDDEN & set(value) or not value.isprintable():
        raise ValueError(f"{value!r} is not an NVMe Qualified Name; {allowed}")
    return value


Nqn = Annotated[str, Strict(), AfterValidator(_nqn)]


# Versions as drivers, CUDA, NCCL, DCGM, OFED, VBIOS, kernels and Python packages print them:
# 570.133.20, 12.8, 2.21.5-1+cuda12.4, 1:3.3.6-1 (a Debian epoch), 24.10-1.1.4.0,
# MLNX_OFED_LINUX-24.10-1.1.4.0 (a package prefix), 96.00.5E.00.01, 5.15.0-1061-aws, 0.4.0rc1.
# Digits first (after an optional prefix or epoch), then alphanumeric runs joined by . _ + ~ -:
# no spaces, quotes, braces, `$` or anything else a shell or Jinja would read.
VERSION_MAX = 64
_VERSION = re.compile(r"(?:[A-Za-z][A-Za-z0-9_]*-)?(?:[0-9]{1,9}:)?[0-9][0-9A-Za-z]*(?:[._+~-][0-9A-Za-z]+)*")


def _version(value: str) -> str:
    if len(value) <= VERSION_MAX and _VERSION.fullmatch(value):
        return value
    raise ValueError(
        f"{value!r} is not a version; allowed: digits first, then letters and digits joined by . - + ~ _ "
        f"(e.g. 570.133.20, 2.21.5-1+cuda12.4), at most {VERSION_MAX} characters"
    )


Version = Annotated[str, Strict(), AfterValidator(_version)]


# Mount points: a node mounts the shared file system there, as root. A path outside the system's
# own trees, written once (absolute and normalized), so the mount can neither hide nor replace
# what the OS runs from, nor mean two different directories.
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var/lib",
    "/var/log",
    "/var/run",
    "/var/cache",
    "/var/spool",
    "/var/tmp",
)
# Directories that hold the system trees: refused themselves, allowed below (/var/scratch, /mnt/x).
SYSTEM_ROOTS = ("/", "/var", "/mnt", "/media", "/home", "/opt", "/srv")
_PATH_PART = re.compile(r"[A-Za-z0-9._-]+")


def mount_point(value: str) -> str:
    """`value` if it is a mount point a node may mount at (see SYSTEM_TREES); ValueError says why not."""
    allowed = "allowed: an absolute, normalized path outside the system trees (e.g. /lustre, /mnt/scratch)"
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not absolute; {allowed}")
    if value != "/" and (value.endswith("/") or "//" in value):
        raise ValueError(f"{value!r} is not normalized (no // or trailing /); {allowed}")
    parts = value.split("/")[1:]
    if value != "/" and any(p in {".", ".."} or not _PATH_PART.fullmatch(p) for p in parts):
        raise ValueError(f"{value!r}: path parts are letters, digits, . _ - and never . or ..; {allowed}")
    if value in SYSTEM_ROOTS:
        raise ValueError(f"{value!r} would hide a directory the system uses; {allowed}")
    for tree in SYSTEM_TREES:
        if value == tree or value.startswith(tree + "/"):
            raise ValueError(f"{value!r} is under {tree}, a system tree; {allowed}")
    return value


_mount_point = mount_point  # the old private name
MountPoint = Annotated[str, Strict(), AfterValidator(mount_point)]


def _cidr_text(value: Any) -> Any:
    # ipaddress accepts an int (0 -> 0.0.0.0/32) and a bare address (a /32): both read as a network
    # no one meant. A range is text with its prefix length.
    if isinstance(value, ipaddress.IPv4Network):
        return value
    if not isinstance(value, str) or "/" not in value:
        raise ValueError(f"{value!r} is not an IPv4 range; allowed: text a.b.c.d/n, e.g. 10.0.0.0/8")
    return value


Cidr = Annotated[ipaddress.IPv4Network, BeforeValidator(_cidr_text)]


# Provider resource ids and references (ami-..., projects/p/global/images/..., Azure resource ids,
# Canonical:ubuntu:22_04-lts:latest): each cloud checks its own form; all of them share this
# character set, which has no whitespace, quotes, braces or shell characters.
_CLOUD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=-]{0,1023}")


def _cloud_id(value: str) -> str:
    if _CLOUD_ID.fullmatch(value):
        return value
    raise ValueError(
        f"{value!r} is not a resource id; allowed: letters, digits and . _ : / @ + = - "
        "(starting with a letter or digit), at most 1024 characters"
    )


CloudId = Annotated[str, Strict(), AfterValidator(_cloud_id)]
