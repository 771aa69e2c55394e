"""Minimal HTTP/1.1 over a socket: one POST at a time on a kept-alive connection, with chunked,
length-delimited and close-delimited bodies read incrementally (for SSE).

Why not http.client: it imports the `email` package (header parsing) — ~25 ms on an idle machine,
several times that under load — and the builtin worker's whole explore run has a 0.3 s budget.
What we need is small: a request line, headers, a status line, three body framings. `ssl` is
imported only for https endpoints (the sim and local models are plain http on loopback).
"""

from __future__ import annotations

import socket

TYPE_CHECKING = False  # typing costs the worker's start-up ~5 ms; annotations are strings here
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


class WireError(Exception):
    """The connection broke or the server spoke something that is not HTTP."""


class ProxyRefused(WireError):
    """The proxy answered CONNECT with something other than 200."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status} {reason}".strip())
        self.status = status


class CaFileError(Exception):
    """The CA bundle from SSL_CERT_FILE (the worker config's ca_pem) cannot be loaded."""


class Response:
    def __init__(self, status: int, headers: dict[str, str], fp: Any, will_close: bool) -> None:
        self.status = status
        self.headers = headers
        self._fp = fp
        self.will_close = will_close
        self._done = False

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (transfer encoding removed)."""
        if self._done:
            return
        fp, h = self._fp, self.headers
        if "chunked" in h.get("transfer-encoding", "").lower():
            while True:
                line = fp.readline(65537)
                if not line:
                    raise WireError("connection closed inside a chunked body")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise WireError(f"bad chunk size line {line[:40]!r}") from None
                if size == 0:
                    while fp.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                data = fp.read(size)
                if len(data) < size:
                    raise WireError("connection closed inside a chunk")
                fp.readline(3)
                yield data
        elif "content-length" in h:
            left = int(h["content-length"])
            while left > 0:
                data = fp.read1(min(left, 65536))
                if not data:
                    raise WireError(f"connection closed with {left} body bytes missing")
                left -= len(data)
                yield data
        else:
            self.will_close = True
            while True:
                data = fp.read1(65536)
                if not data:
                    break
                yield data
        self._done = True

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def lines(self) -> Iterator[bytes]:
        buf = b""
        for data in self.chunks():
            buf += data
            *complete, buf = buf.split(b"\n")
            yield from complete
        if buf:
            yield buf


class Connection:
    def __init__(self, host: str, port: int, https: bool, timeout_s: float,
                 proxy: dict[str, Any] | None = None, ca_pem: str | None = None) -> None:
        self.host, self.port, self.https, self.timeout_s = host, port, https, timeout_s
        self.proxy = proxy  # {host, port, auth}: builtin_net.proxy_for
        self.ca_pem = ca_pem  # PEM text (builtin_net.ca_bundle), None: the system's CA bundle
        self._sock: socket.socket | None = None
        self._fp: Any = None

    def close(self) -> None:
        for obj in (self._fp, self._sock):
            if obj is not None:
                try:
                    obj.close()
                except OSError:
                    pass
        self._sock = self._fp = None

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def _open(self) -> None:
        # an ASCII host goes to getaddrinfo as bytes: a str is IDNA-encoded first, and the idna codec
        # (with stringprep and unicodedata) costs the worker's start-up several ms
        name = self.proxy["host"] if self.proxy else self.host
        port = self.proxy["port"] if self.proxy else self.port
        host: str | bytes = name.encode("ascii") if name.isascii() else name
        sock = socket.create_connection((host, port), timeout=self.timeout_s)  # type: ignore[arg-type]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.https:
            import ssl  # lazy: ~10 ms, only for remote endpoints

            try:
                context = ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else \
                    ssl.create_default_context()
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise CaFileError(getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)) from None
            if self.proxy:
                self._tunnel(sock)
            sock = context.wrap_socket(sock, server_hostname=self.host)
        self._sock = sock
        self._fp = sock.makefile("rb")

    def _tunnel(self, sock: socket.socket) -> None:
        """CONNECT through the proxy; the TLS session then runs inside the tunnel, end to end."""
        target = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        head = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
        if self.proxy and self.proxy.get("auth"):
            head.append(f"Proxy-Authorization: {self.proxy['auth']}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        buf = b""
        while b"\r\n\r\n" not in buf:  # nothing follows the head: TLS waits for our ClientHello
            data = sock.recv(4096)
            if not data:
                raise ConnectionResetError("the proxy closed the connection during CONNECT")
            buf += data
            if len(buf) > 65536:
                raise WireError("the proxy's answer to CONNECT has no end")
        parts = buf.split(b"\r\n", 1)[0].decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise WireError(f"the proxy did not answer CONNECT in HTTP: {buf[:60]!r}")
        if parts[1] != "200":
            raise ProxyRefused(int(parts[1]), parts[2] if len(parts) > 2 else "")

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> Response:
        if self._sock is None:
            self._open()
        assert self._sock is not None
        host = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        target = path
        if self.proxy and not self.https:  # a plain-http proxy takes the whole URL
            target = f"http://{host}{path}"
            if self.proxy.get("auth"):
                headers = {**headers, "Proxy-Authorization": self.proxy["auth"]}
        head = [f"POST {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        self._sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        status_line = self._fp.readline(65537)
        if not status_line:
            raise ConnectionResetError("the server closed the connection before answering")
        parts = status_line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise WireError(f"not an HTTP response: {status_line[:60]!r}")
        version, status = parts[0], int(parts[1])
        hdrs: dict[str, str] = {}
        while True:
            line = self._fp.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip()
            hdrs[name] = f"{hdrs[name]}, {value}" if name in hdrs else value
        conn_hdr = hdrs.get("connection", "").lower()
        will_close = "close" in conn_hdr or (version == "HTTP/1.0" and "keep-alive" not in conn_hdr)
        return Response(status, hdrs, self._fp, will_close)
