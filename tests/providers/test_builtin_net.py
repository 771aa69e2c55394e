"""The builtin runner through a proxy and with a CA bundle of its own (providers/runners/builtin_net.py):
real dispatches to a real sim behind a real loopback proxy (tests/proxy_support.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pilothouse.providers import paths
from pilothouse.providers.sim.server import SimServer
from proxy_support import LoopbackProxy, TlsFront, make_cert

SECRET = "pr0xy-s3cret-pw"


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer("code-basic") as server:
        yield server


def provider(base_url: str, key: str = "edge") -> str:
    d = paths.config_dir() / "providers"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{key}.yaml").write_text(f"key: {key}\nprovider_id: edge\nmodel_id: sim-1\nbase_url: {base_url}\n"
                                   f"display_name: an endpoint behind a proxy\nrunner: builtin\nneeds_key: false\n")
    return key


def dispatch(cli, repo: Path, tmp_path: Path, key: str, env: dict[str, str], mode: str = "code") -> dict:
    task = tmp_path / "task.md"
    task.write_text("Add slugify in src/slug.py.\n")
    r = cli("dispatch", "--provider", key, "--mode", mode, "--workdir", str(repo), "--task-file", str(task),
            env={"HTTP_PROXY": "", "HTTPS_PROXY": "", "NO_PROXY": "", **env})
    out = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert len(out) == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return out[1]


def test_a_confined_builder_reaches_an_http_endpoint_through_http_proxy(cli, git_repo, tmp_path, sim):
    key = provider(sim.base_url + "/v1")
    with LoopbackProxy() as proxy:
        v = dispatch(cli, git_repo, tmp_path, key, {"HTTP_PROXY": proxy.url})
    assert v["verdict"] == "completed", v
    assert (git_repo / "src/slug.py").exists()  # the code run was confined and wrote its worktree
    assert proxy.seen and set(proxy.seen) == {f"POST {sim.base_url}/v1/chat/completions"}


def test_no_proxy_sends_the_endpoint_past_the_proxy(cli, git_repo, tmp_path, sim):
    key = provider(sim.base_url + "/v1")
    with LoopbackProxy() as proxy:
        v = dispatch(cli, git_repo, tmp_path, key, {"HTTP_PROXY": proxy.url, "NO_PROXY": "localhost,127.0.0.1"},
                     mode="explore")
    assert v["verdict"] != "error", v
    assert proxy.seen == []


def test_an_https_endpoint_is_reached_through_a_connect_tunnel_with_the_ca_from_ssl_cert_file(
        cli, git_repo, tmp_path, sim):
    cert, pem_key = make_cert(tmp_path)
    with TlsFront(cert, pem_key, int(sim.base_url.rsplit(":", 1)[1])) as front, \
            LoopbackProxy(require_auth="Basic " + base64.b64encode(f"me:{SECRET}".encode()).decode()) as proxy:
        key = provider(f"https://127.0.0.1:{front.port}/v1")
        v = dispatch(cli, git_repo, tmp_path, key, {"HTTPS_PROXY": f"http://me:{SECRET}@127.0.0.1:{proxy.port}",
                                                    "SSL_CERT_FILE": str(cert)}, mode="explore")
    assert v["verdict"] != "error", v
    assert proxy.seen and set(proxy.seen) == {f"CONNECT 127.0.0.1:{front.port}"}
    # the proxy's password went to the proxy and nowhere else: not the logs, not the run folder
    encoded = base64.b64encode(f"me:{SECRET}".encode()).decode()
    for base in (paths.logs_dir(), paths.providers_dir()):
        for f in base.rglob("*"):
            if f.is_file():
                text = f.read_text(errors="replace")
                assert SECRET not in text and encoded not in text, f


def test_a_proxy_that_refuses_the_credentials_is_a_fatal_error_without_the_password(cli, git_repo, tmp_path, sim):
    cert, pem_key = make_cert(tmp_path)
    with TlsFront(cert, pem_key, int(sim.base_url.rsplit(":", 1)[1])) as front, \
            LoopbackProxy(require_auth="Basic other") as proxy:
        key = provider(f"https://127.0.0.1:{front.port}/v1")
        v = dispatch(cli, git_repo, tmp_path, key, {"HTTPS_PROXY": f"http://me:{SECRET}@127.0.0.1:{proxy.port}",
                                                    "SSL_CERT_FILE": str(cert)}, mode="explore")
    assert (v["verdict"], v["error_class"]) == ("error", "fatal")
    assert f"the proxy http://…@127.0.0.1:{proxy.port} refused to connect" in v["error"] and "407" in v["error"]
    assert SECRET not in json.dumps(v)


def test_a_bad_ssl_cert_file_is_one_line_naming_it(cli, git_repo, tmp_path, sim):
    cert, pem_key = make_cert(tmp_path)
    bogus = tmp_path / "not-a-bundle.pem"
    bogus.write_text("this is not a certificate\n")
    with TlsFront(cert, pem_key, int(sim.base_url.rsplit(":", 1)[1])) as front:
        key = provider(f"https://127.0.0.1:{front.port}/v1")
        v = dispatch(cli, git_repo, tmp_path, key, {"SSL_CERT_FILE": str(bogus)}, mode="explore")
    assert (v["verdict"], v["error_class"]) == ("error", "fatal")
    assert v["error"].startswith(f"SSL_CERT_FILE={bogus}: cannot load a CA bundle from it")
    assert "\n" not in v["error"] and v["error"].endswith("point it at a PEM file of CA certificates, or unset it")


def test_a_certificate_no_ca_vouches_for_says_to_set_ssl_cert_file(cli, git_repo, tmp_path, sim):
    cert, pem_key = make_cert(tmp_path)
    other, _ = make_cert(tmp_path / "..")  # a CA that did not sign the endpoint's certificate
    with TlsFront(cert, pem_key, int(sim.base_url.rsplit(":", 1)[1])) as front:
        key = provider(f"https://127.0.0.1:{front.port}/v1")
        v = dispatch(cli, git_repo, tmp_path, key, {"SSL_CERT_FILE": str(other)}, mode="explore")
    assert (v["verdict"], v["error_class"]) == ("error", "fatal")
    assert "TLS certificate of https://127.0.0.1" in v["error"] and "point SSL_CERT_FILE at" in v["error"]


def test_a_proxy_that_is_not_http_is_refused_in_one_line(cli, git_repo, tmp_path, sim):
    key = provider(sim.base_url + "/v1")
    v = dispatch(cli, git_repo, tmp_path, key, {"HTTP_PROXY": f"socks5://me:{SECRET}@127.0.0.1:1080"},
                 mode="explore")
    assert v["verdict"] == "error" and "speaks only to http:// proxies" in v["error"]
    assert "HTTP_PROXY=socks5://…@127.0.0.1:1080" in v["error"] and SECRET not in json.dumps(v)
