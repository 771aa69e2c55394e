"""Is it a Ray head that answers at ray.address? One real call of Ray's own protocol to find out.

An open port is not enough: something else listening at the address (a web server, another gRPC
service) used to pass `check` and `job start`, and every cluster run then failed ~20 s later with a
reason that did not name ray.address. Ray's head answers on its --port with its GCS, a gRPC
server; a `ray://` address is the Ray Client server. The call goes over h2 (HTTP/2 framing and
HPACK) rather than grpcio, which Ray's minimal install does not bring; an empty request is a valid
one for both calls, so no Ray protobufs are needed either.
"""

from __future__ import annotations

import socket
import time
from typing import Any

_CALL = {"gcs": "/ray.rpc.NodeInfoGcsService/GetClusterId", "client": "/ray.rpc.RayletDriver/ClusterInfo"}
_UNIMPLEMENTED = "12"  # gRPC's status code for a method the server does not have
WAIT_S = 5.0


def not_a_ray_head(address: str) -> str | None:
    """Why what answers at `address` is not Ray; None when it is (or when h2 is missing to ask)."""
    answer = _ask(address)
    if answer is None:
        return None
    status, _reply, waited = answer
    if status is None:
        return (f"gives no answer in Ray's protocol (gRPC over HTTP/2) within {WAIT_S:g} s" if waited
                else "not in Ray's protocol (gRPC over HTTP/2)")
    if status == "":  # the stream ended with no grpc-status: an HTTP/2 server, but not a gRPC one
        return "its HTTP/2 server does not answer in gRPC"
    if status == _UNIMPLEMENTED:
        return "its gRPC server does not know Ray's " + ("client calls" if address.startswith("ray://") else "head calls")
    return None  # an answer to Ray's own call: OK, or a refusal only a Ray server gives


def cluster_id(address: str) -> bytes | None:
    """The id of the cluster whose head answers at `address` (a head started again there, without
    Ray's fault tolerance, is a new cluster with a new id); None when none answers with one."""
    answer = None if address.startswith("ray://") else _ask(address)
    if answer is None or answer[0] != "0" or len(answer[1]) < 5:
        return None
    message = answer[1][5:]  # past gRPC's flag byte and length
    found = _field(message, 2)  # GetClusterIdReply.cluster_id
    return found if found else message


def _field(message: bytes, number: int) -> bytes | None:
    """A length-delimited field of a protobuf message (no protobuf library: Ray's minimal install
    has none of its own messages)."""
    at = 0
    try:
        while at < len(message):
            tag, at = _varint(message, at)
            kind = tag & 7
            if kind == 0:
                _, at = _varint(message, at)
            elif kind == 2:
                size, at = _varint(message, at)
                if tag >> 3 == number:
                    return message[at:at + size]
                at += size
            elif kind in (1, 5):
                at += 8 if kind == 1 else 4
            else:
                return None
    except IndexError:
        return None
    return None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _ask(address: str) -> tuple[str | None, bytes, bool] | None:
    """One call of Ray's own (GetClusterId of a head, ClusterInfo of a client server): its gRPC
    status ("" when the stream ended without one, None when nothing answered in HTTP/2), its reply
    message and whether the wait ran out; None when h2 is missing to ask."""
    try:
        import h2.config
        import h2.connection
        import h2.events
        import h2.exceptions
    except ImportError:
        return None
    client = address.startswith("ray://")
    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", _CALL["client" if client else "gcs"]),
                               (":authority", target), ("content-type", "application/grpc"), ("te", "trailers")])
    conn.send_data(stream, b"\0\0\0\0\0", end_stream=True)  # one gRPC message of zero bytes, uncompressed
    status: str | None = None
    reply = b""
    waited = False
    deadline = time.monotonic() + WAIT_S
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=WAIT_S) as sock:
            sock.sendall(conn.data_to_send())
            while status is None:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                data = sock.recv(65536)
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                        # header_encoding above makes h2 hand out str, which its types do not say
                        headers: dict[Any, Any] = dict(event.headers or [])
                        status = headers.get("grpc-status", status)
                    elif isinstance(event, h2.events.DataReceived):
                        reply += event.data or b""
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)) and status is None:
                        status = ""
                sock.sendall(conn.data_to_send())
    except TimeoutError:
        waited = True
    except (OSError, h2.exceptions.ProtocolError):
        status = None
    return status, reply, waited
