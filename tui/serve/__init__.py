"""The cockpit served to a browser, for its owner only (`pilothouse serve`)."""

from __future__ import annotations

import asyncio
import secrets

from pilothouse.tui.serve.server import CockpitServer, ServeOptions

__all__ = ["ServeOptions", "serve"]


def serve(options: ServeOptions) -> int:
    token = secrets.token_urlsafe(32)
    server = CockpitServer(options, token)

    def announce(address: str) -> None:
        if options.socket is not None:
            print(f"pilothouse serve: listening on {address} (owner only). From your machine:\n"
                  f"  ssh -L 8600:{address} HOST\n"
                  f"then open http://localhost:8600/?token={token}", flush=True)
        else:
            print(f"pilothouse serve: open http://{address}/?token={token}", flush=True)
        print("pilothouse serve: the token is this server's only key; Ctrl+C stops it", flush=True)

    asyncio.run(server.run(announce))
    return 0
