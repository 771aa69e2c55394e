"""A real forward proxy and a TLS front on loopback, for the builtin client's proxy tests.

`LoopbackProxy` speaks both ways a client uses a proxy: CONNECT (a tunnel, for https endpoints)
and an absolute-form request (`POST http://host:port/path`, for http ones). After the first
request line it only pipes bytes, as a real proxy does with a tunnel or a kept-alive connection;
every first line is kept in `seen`, so a test can tell that a request went through it.
`TlsFront` terminates TLS with a certificate made by `openssl` for 127.0.0.1 and pipes the plain
bytes to an http server (the sim), so a test has an https endpoint with a CA of its own.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import ssl
import subprocess
import threading
from pathlib import Path

from support import guard


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _splice(a: socket.socket, b: socket.socket) -> None:
    back = threading.Thread(target=_pipe, args=(b, a), daemon=True)
    back.start()
    _pipe(a, b)
    back.join(timeout=guard(30))
    a.close()
    b.close()


def _splice_tls(tls: ssl.SSLSocket, plain: socket.socket) -> None:
    """_splice for a TLS socket, in one thread: an SSL object must not read and write at once."""
    sel = selectors.DefaultSelector()
    sel.register(tls, selectors.EVENT_READ, plain)
    sel.register(plain, selectors.EVENT_READ, tls)
    try:
        while sel.get_map():
            for key, _ in sel.select(timeout=guard(60)) or [(None, None)]:
                if key is None:
                    return  # idle for a minute: the test is long over
                src, dst = key.fileobj, key.data
                try:
                    data = src.recv(65536)  # type: ignore[union-attr]
                    while isinstance(src, ssl.SSLSocket) and src.pending():
                        data += src.recv(src.pending())  # decrypted bytes select cannot see
                except ssl.SSLWantReadError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    return
                dst.sendall(data)
    finally:
        sel.close()
        tls.close()
        plain.close()


class _Listener:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):  # noqa: ANN204 - each subclass returns itself
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LoopbackProxy(_Listener):
    def __init__(self, require_auth: str | None = None) -> None:
        self.seen: list[str] = []  # the first request line of every connection
        self.auth: list[str | None] = []  # the Proxy-Authorization each one carried
        self.require_auth = require_auth
        super().__init__()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data:
                conn.close()
                return
            head += data
        head, _, rest = head.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        auth = next((ln.split(":", 1)[1].strip() for ln in lines[1:]
                     if ln.lower().startswith("proxy-authorization:")), None)
        self.seen.append(f"{method} {target}")
        self.auth.append(auth)
        if self.require_auth is not None and auth != self.require_auth:
            conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            conn.close()
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host.strip("[]"), int(port)))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            _splice(conn, upstream)
            return
        host_port = target.split("//", 1)[1].split("/", 1)[0]
        host, _, port = host_port.rpartition(":")
        upstream = socket.create_connection((host, int(port or 80)))
        # the origin server gets the request as the client sent it (the sim reads absolute-form too)
        upstream.sendall(head + b"\r\n\r\n" + rest)
        _splice(conn, upstream)


def make_cert(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, self-signed: the certificate is its own CA bundle."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=pilothouse test", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


class TlsFront(_Listener):
    def __init__(self, cert: Path, key: Path, upstream_port: int) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.upstream_port = upstream_port
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()  # a client that refused our certificate
            return
        _splice_tls(tls, socket.create_connection(("127.0.0.1", self.upstream_port)))
