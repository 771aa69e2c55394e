"""Fixtures of the real-model suite: one llama.cpp server per test process (session scope), and a
provider file pointing pilothouse at it, written where docs/providers.md tells a user to put one.

A missing build fails every test here with one line naming scripts/install-model-server: a skip
would let CI report green without ever talking to a real model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from modelserver import (
    ModelServer,
    NotAnswering,
    NotInstalled,
    RealModel,
    installed,
    keep_log,
    write_provider,
)

# the runner's environment, before tests/conftest.py gives each test a home of its own: the build
# lives in the runner's cache, not in a test's
RUNNER_ENV = dict(os.environ)
PROVIDER = "smollm2-local"
OUTPUT_TOKENS = 256


@pytest.fixture(scope="session")
def model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    missing = None
    try:
        python, gguf = installed(RUNNER_ENV)
    except NotInstalled as exc:
        missing = str(exc)
    if missing:  # outside the except: the one line, without the exception it replaces
        pytest.fail(missing, pytrace=False)
    server = ModelServer(python, gguf, tmp_path_factory.mktemp("llama-server"))
    try:
        server.start()
        silent = None
        try:
            server.check_answers()
        except NotAnswering as exc:
            silent = str(exc)
        if silent:  # one line per test, not a connection error's traceback
            pytest.fail(silent, pytrace=False)
        _check_the_counts(server)
        yield server
    finally:
        server.stop()
        artifacts = RUNNER_ENV.get("PILOTHOUSE_TEST_ARTIFACTS")
        keep_log(server, Path(artifacts) / "realmodel" if artifacts else None)


def _check_the_counts(server: ModelServer) -> None:
    """The suite compares pilothouse's usage with the server's own counts read from its log: first
    prove that reading against the usage the server reports for a non-streamed answer, cut off at
    the cap and ended by the model."""
    for max_tokens, prompt in ((12, "Count from one to fifty in words."), (64, "Reply with the single word: yes")):
        answer, ex = server.chat([{"role": "user", "content": prompt}], max_tokens)
        usage = answer["usage"]
        got = (ex.prompt_tokens, ex.completion_tokens)
        assert got == (usage["prompt_tokens"], usage["completion_tokens"]) and ex.exact, (
            f"the server's log no longer tells its token counts: read {got}, it answered {usage}\n{ex.log}")


@pytest.fixture
def realmodel(model_server: ModelServer, isolated_home: Path) -> RealModel:
    """The provider `smollm2-local` in this test's PILOTHOUSE_HOME/config/providers/ (docs/providers.md)."""
    write_provider(PROVIDER, model_server.url, OUTPUT_TOKENS)
    assert model_server.recorder is not None
    return RealModel(model_server, PROVIDER, model_server.recorder.mark())
