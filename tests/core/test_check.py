"""`pilothouse check` (core/records/check.py) and what loading project.yaml refuses by itself:
every finding one line naming the file and field with the fix; `job start` refuses on any."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def repo(git_repo: Path, cli) -> Path:
    r = cli("init", "--gate-fast", "true", cwd=git_repo)
    assert r.returncode == 0, r.stderr
    return git_repo


def _set(repo: Path, old: str, new: str) -> None:
    py = repo / ".ai/project.yaml"
    text = py.read_text()
    assert old in text
    py.write_text(text.replace(old, new))


def _refused(r, *words: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_a_fresh_project_passes_and_review_off_is_the_word(repo: Path, cli) -> None:
    _set(repo, "review: once", "review: off")  # YAML 1.1 would read a boolean here
    r = cli("check", cwd=repo)
    assert r.returncode == 0 and "fit to run a job" in r.stdout, r.stderr


@pytest.mark.parametrize(("old", "new", "words"), [
    # init with no key configured: every role on the simulator
    ("roles: {coordinator: sim, reviewer: sim}", "roles: {coordinator: claude-cod}",
     ("model_policy.roles.coordinator: unknown provider 'claude-cod'", "did you mean claude-code?")),
    ("simulator: {provider: sim}", "fast: {provider: nosuch}",
     ("model_policy.assignments.fast.provider: unknown provider 'nosuch'",)),
    ("max_workers: 2", "max_workers: 2\nsim_scenario: /etc/passwd", ("sim_scenario: /etc/passwd is not where",)),
    ("max_workers: 2", "max_workers: 2\nsim_scenario: scenarios/gone.yaml",
     ("sim_scenario: scenarios/gone.yaml: no such scenario file",)),
    ('fast: "true"', 'fast: "tr\\0ue"', (".ai/project.yaml:5: gates: gate 'fast' has a NUL byte",)),
    ("setup: []", 'setup: ["npm\\0ci"]', ("setup: command 1 has a NUL byte",)),
    ("max_workers: 2", "max_worker: 2", ("max_worker: unknown key", "did you mean max_workers?")),
    ("max_workers: 2", "max_workers: 2\nmax_workers: 3", ("duplicate key 'max_workers'",)),
    # a cluster nothing answers at: joining it would hang every cluster run without a word
    ("max_workers: 2", "max_workers: 2\nexecutor: ray\nray: {address: '127.0.0.1:1'}",
     ("ray.address in .ai/project.yaml: no Ray head answers at 127.0.0.1:1 (Connection refused)",)),
])
def test_check_and_job_start_refuse_what_the_settings_cannot_run(repo: Path, cli, old: str, new: str,
                                                                 words: tuple[str, ...]) -> None:
    _set(repo, old, new)
    _refused(cli("check", cwd=repo), ".ai/project.yaml", *words)
    _refused(cli("job", "start", cwd=repo), *words)
    assert not (repo / ".ai/runtime/supervisor.log").exists()  # nothing was launched


def test_a_scenario_of_the_repository_must_be_a_scenario(repo: Path, cli) -> None:
    (repo / "scen.yaml").write_text("name: x\ndescription: y\nscripts: []\n")
    _set(repo, "max_workers: 2", "max_workers: 2\nsim_scenario: scen.yaml")
    _refused(cli("check", cwd=repo), "sim_scenario: ", "scen.yaml: scripts")


def _web_server() -> tuple[object, int]:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def test_a_port_where_something_other_than_ray_answers_is_not_a_cluster(repo: Path, cli) -> None:
    """An open port passed once, and every cluster run then failed ~20 s later without naming
    ray.address: the check makes one call of Ray's own protocol."""
    from concurrent import futures

    import grpc

    web, web_port = _web_server()
    other_grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))  # a gRPC service, not Ray's
    grpc_port = other_grpc.add_insecure_port("127.0.0.1:0")
    other_grpc.start()
    try:
        for port, why in ((web_port, "answers, but not in Ray's protocol (gRPC over HTTP/2)"),
                          (grpc_port, "answers, but its gRPC server does not know Ray's head calls")):
            text = (repo / ".ai/project.yaml").read_text().split("\nexecutor:")[0]
            (repo / ".ai/project.yaml").write_text(text + f"\nexecutor: ray\nray: {{address: '127.0.0.1:{port}'}}\n")
            words = (f"ray.address in .ai/project.yaml: 127.0.0.1:{port} {why}: it is not a Ray head",
                     f"`ray start --head --port {port}`")
            _refused(cli("check", cwd=repo), *words)
            _refused(cli("job", "start", cwd=repo), *words)
    finally:
        other_grpc.stop(None)
        web.shutdown()  # type: ignore[attr-defined]
    assert not (repo / ".ai/runtime/supervisor.log").exists()


def test_a_listener_that_never_answers_is_not_waited_on_for_ever(monkeypatch) -> None:
    import socket

    from pilothouse.core.records import ray_head

    monkeypatch.setattr(ray_head, "WAIT_S", 0.5)  # it never answers: any wait gives the same verdict
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        assert ray_head.not_a_ray_head(f"127.0.0.1:{port}") == \
            "gives no answer in Ray's protocol (gRPC over HTTP/2) within 0.5 s"


def test_an_http2_server_that_is_not_grpc_is_not_a_ray_head() -> None:
    """An HTTP/2 server (h2c) that answers Ray's call with a plain 404 and no grpc-status."""
    import socket
    import threading

    import h2.config
    import h2.connection
    import h2.events
    from pilothouse.core.records.ray_head import not_a_ray_head

    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        with conn:
            while data := conn.recv(65536):
                for event in h2c.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        h2c.send_headers(event.stream_id, [(":status", "404"), ("content-length", "0")],
                                         end_stream=True)
                conn.sendall(h2c.data_to_send())

    threading.Thread(target=serve, daemon=True).start()
    with listener:
        assert not_a_ray_head(f"127.0.0.1:{listener.getsockname()[1]}") == "its HTTP/2 server does not answer in gRPC"
