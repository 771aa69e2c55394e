"""How the builtin worker reaches its endpoint: the proxy and the CA bundle from the environment.

Decided on the host, from dispatch's own environment, and handed to the worker in its stdin
config (never argv or the worker's environment, which the commands of its bash tool inherit: a
proxy address may carry a password). The worker's socket then goes to the proxy (a CONNECT
tunnel for https, an absolute-form request for http); a confined worker shares the host's
network, so a proxy on the host's loopback is reachable from inside the sandbox too.

The variables mean what they mean to curl and Python's urllib: HTTPS_PROXY for https endpoints,
HTTP_PROXY for http ones (lower-case spellings too), NO_PROXY lists hosts (and domain suffixes,
or `*`) that are reached directly. Only http:// proxies are supported. SSL_CERT_FILE replaces the
system's CA bundle for https endpoints (read here, handed over as text). Two exceptions, both without any proxy: the simulator
(in-process, on loopback) and a run under `network: none` (its sandbox reaches the model's
loopback port through providers/netrelay.py and nothing else, so a proxy would be out of reach).
"""

from __future__ import annotations

import base64
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from pilothouse.providers.errors import UserError

if TYPE_CHECKING:
    from pilothouse.providers.runners.base import RunSpec


def _shown(url: str) -> str:
    """A proxy address fit for a message: its user and password replaced."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return parts._replace(netloc="…@" + parts.netloc.rpartition("@")[2]).geturl()


def proxy_for(base_url: str) -> dict[str, Any] | None:
    """The http:// proxy the environment names for `base_url` ({host, port, auth}), or None."""
    if not any(k.lower() in ("http_proxy", "https_proxy", "all_proxy") for k in os.environ):
        return None  # the common case: no urllib.request import (it costs ~20 ms)
    # proxy_bypass_environment: NO_PROXY as urllib reads it (in urllib since 3.x, not in typeshed)
    from urllib.request import getproxies_environment, proxy_bypass_environment  # type: ignore[attr-defined]

    target = urlsplit(base_url)
    proxies = getproxies_environment()
    proxy = proxies.get(target.scheme) or proxies.get("all")
    if not proxy or not target.hostname:
        return None
    hostport = target.netloc.rpartition("@")[2]
    if proxy_bypass_environment(hostport, proxies) or proxy_bypass_environment(target.hostname, proxies):
        return None
    name = f"{target.scheme.upper()}_PROXY"
    if "://" not in proxy:
        proxy = "http://" + proxy
    parts = urlsplit(proxy)
    if parts.scheme != "http":
        raise UserError(f"{name}={_shown(proxy)}: the builtin runner speaks only to http:// proxies "
                        f"(give the proxy as http://HOST:PORT, or add {target.hostname} to NO_PROXY)")
    try:
        port = parts.port or 80
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UserError(f"{name}={_shown(proxy)}: not a proxy address (give it as http://HOST:PORT)")
    auth = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    return {"host": parts.hostname, "port": port, "auth": auth, "shown": _shown(proxy)}


def ca_bundle(path: str) -> str:
    """The PEM text of SSL_CERT_FILE, checked here: a bad one is one line before any run starts.

    The worker gets the text, not the path: its sandbox has a private /tmp and may hide the
    folder the bundle is in."""
    import ssl

    from pilothouse.providers.userfile import decode, read_bytes

    what = f"SSL_CERT_FILE={path}"
    fix = "point it at a PEM file of CA certificates, or unset it"
    try:
        text = decode(read_bytes(path, what, 16 << 20, too_long_fix=fix), what, fix)
        ssl.create_default_context(cadata=text)
    except FileNotFoundError:
        raise UserError(f"{what}: no such file: {fix}") from None
    except (ssl.SSLError, ValueError) as exc:
        raise UserError(f"{what}: cannot load a CA bundle from it ({getattr(exc, 'reason', None) or exc}): "
                        f"{fix}") from None
    return text


def network_config(spec: RunSpec) -> dict[str, Any]:
    """The worker config's `proxy` and `ca_pem` for this run (see the module docstring)."""
    out: dict[str, Any] = {}
    url = str(spec.base_url or "")
    if url.startswith("https://"):
        ca_file = os.environ.get("SSL_CERT_FILE")
        if ca_file:
            out["ca_pem"] = ca_bundle(ca_file)
    if not getattr(spec.provider, "is_sim", False) and str(spec.extra.get("network", "")).lower() != "none":
        proxy = proxy_for(url)
        if proxy is not None:
            out["proxy"] = proxy
    return out
