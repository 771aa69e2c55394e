"""The one connection a worker keeps under `network: none`: its model on the host's loopback.

A confined run with `network: none` gets its own, empty network namespace (--unshare-net): no
route anywhere, and a loopback of its own. A local model (ollama, llama.cpp, the sim) listens on
the *host's* 127.0.0.1, which that namespace cannot reach. So the launch becomes

    netrelay outer --sock S --target HOST:PORT -- bwrap … -- netrelay inner --sock S --listen HOST:PORT -- worker…

`outer` (on the host) accepts on the unix socket S and connects each stream to HOST:PORT;
`inner` (inside the sandbox) listens on HOST:PORT of the sandbox's loopback and connects each
stream to S, which is bound into the sandbox. The worker talks to its usual base URL; every other
address stays unreachable. Both halves pass stdin/stdout/stderr through untouched, exit with the
worker's exit code, and die with their parent. Stdlib only: it starts in the sandbox before the worker.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _bridge(client: socket.socket, connect: Callable[[], socket.socket]) -> None:
    try:
        upstream = connect()
    except OSError:
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    while True:
        try:
            conn, _addr = listener.accept()
        except OSError:
            return
        threading.Thread(target=_bridge, args=(conn, connect), daemon=True).start()


def _split(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def _run(argv: list[str], on_signal: Callable[[subprocess.Popen[bytes], int], None]) -> int:
    # the handlers go in before the child starts: an abort's SIGTERM sent once the worker is up
    # (it reaches every process in the sandbox, this one too) used to find the default action still
    # set and ended the relay with 143, not with the worker's own exit code. A signal that comes
    # before the child exists is passed on once it does
    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []

    def handle(signum: int, _frame: object) -> None:
        if child is None:
            early.append(signum)
        else:
            on_signal(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)
    child = subprocess.Popen(argv)  # stdin/stdout/stderr inherited: the runner's stream passes through
    for signum in early:
        on_signal(child, signum)
    rc = child.wait()
    return 128 - rc if rc < 0 else rc


def outer(sock_path: str, target: str) -> Callable[[list[str]], int]:
    host, port = _split(target)
    os.makedirs(os.path.dirname(sock_path), mode=0o700, exist_ok=True)  # a relaunch of the same launch
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock_path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, lambda: socket.create_connection((host, port))),
                     daemon=True).start()

    def run(argv: list[str]) -> int:
        try:
            # a signal that reaches us (not the worker) ends bwrap, and with it the sandbox
            return _run(argv, lambda child, signum: child.send_signal(signum))
        finally:
            listener.close()
            shutil.rmtree(os.path.dirname(sock_path), ignore_errors=True)
    return run


def inner(sock_path: str, listen: str) -> Callable[[list[str]], int]:
    host, port = _split(listen)
    hosts = ["127.0.0.1", "::1"] if host in {"localhost", "127.0.0.1"} else [host]
    listeners = []
    for h in hosts:
        family = socket.AF_INET6 if ":" in h else socket.AF_INET
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((h, port))
            s.listen(64)
        except OSError:
            if h == hosts[0]:
                raise
            continue  # no IPv6 loopback in the sandbox: IPv4 is enough
        listeners.append(s)

    def connect() -> socket.socket:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(sock_path)
        return c

    for s in listeners:
        threading.Thread(target=_serve, args=(s, connect), daemon=True).start()
    # the worker receives the abort SIGTERM itself (confine.signal_sandbox): just wait for it
    return lambda argv: _run(argv, lambda _child, _signum: None)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("netrelay: usage: netrelay outer|inner OPTIONS -- COMMAND…", file=sys.stderr)
        return 2
    cut = args.index("--")
    opts, command = args[:cut], args[cut + 1:]
    p = argparse.ArgumentParser(prog="netrelay")
    p.add_argument("side", choices=("outer", "inner"))
    p.add_argument("--sock", required=True)
    p.add_argument("--target")
    p.add_argument("--listen")
    ns = p.parse_args(opts)
    _die_with_parent()
    try:
        run = outer(ns.sock, ns.target) if ns.side == "outer" else inner(ns.sock, ns.listen)
    except OSError as exc:
        print(f"netrelay ({ns.side}): cannot set up the model relay: {exc}", file=sys.stderr)
        return 126
    return run(command)


if __name__ == "__main__":
    sys.exit(main())
