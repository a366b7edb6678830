"""The hub reachability check (`ict.data.hub`): which endpoint it connects to, and offline mode."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ict.data import hub


@pytest.fixture
def connections(monkeypatch):
    """Record `socket.create_connection`'s (host, port) and timeout; no network."""
    seen: list[tuple[tuple[str, int], float]] = []

    def connect(address, timeout=None):
        seen.append((address, timeout))
        return contextlib.nullcontext()

    monkeypatch.setattr(socket, "create_connection", connect)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return seen


@pytest.mark.parametrize(("endpoint", "address"), [
    (None, ("huggingface.co", 443)),
    ("https://hf-mirror.example", ("hf-mirror.example", 443)),
    ("http://hf-mirror.example", ("hf-mirror.example", 80)),  # plain http: port 80, not 443
    ("https://hf-mirror.example:8443/base", ("hf-mirror.example", 8443)),
    ("http://127.0.0.1:8080", ("127.0.0.1", 8080)),
])
def test_the_endpoint_host_and_port_are_the_ones_connected_to(connections, monkeypatch, endpoint, address):
    if endpoint is not None:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    assert hub.hub_reachable(timeout_seconds=1.5) is True
    assert connections == [(address, 1.5)]


@pytest.mark.parametrize("value", ["0", "false", "no", ""])
def test_offline_variables_that_are_not_true_still_check(connections, monkeypatch, value):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", value)
    assert hub.hub_reachable() is True
    assert connections == [(("huggingface.co", 443), 3.0)]


@pytest.mark.parametrize("name", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
@pytest.mark.parametrize("value", ["1", "true", "YES", "on", " On "])
def test_each_true_spelling_of_either_offline_variable_skips_the_check(connections, monkeypatch, name, value):
    """The docstring's 1, true, yes or on, any case (huggingface_hub's true values): offline, and
    no connection is tried."""
    monkeypatch.setenv(name, value)
    assert hub.hub_reachable() is False and connections == []


def test_a_refused_connection_is_unreachable(monkeypatch):
    def refuse(address, timeout=None):
        raise ConnectionRefusedError(111, "refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert hub.hub_reachable() is False


def test_go_offline_switches_both_libraries(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    for module, name in ((datasets.config, "HF_HUB_OFFLINE"), (datasets.config, "HF_DATASETS_OFFLINE"),
                         (huggingface_hub.constants, "HF_HUB_OFFLINE")):
        monkeypatch.setattr(module, name, False)
    hub.go_offline()
    assert datasets.config.HF_HUB_OFFLINE is True
    assert datasets.config.HF_DATASETS_OFFLINE is True
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True


BAD_ENDPOINTS = [("http://localhost:99999", "Port out of range"), ("http://[::1", "Invalid IPv6 URL"),
                 ("http://localhost:abc", "Port could not be cast")]


@pytest.mark.parametrize(("endpoint", "why"), BAD_ENDPOINTS, ids=["port-too-large", "bracket", "port-not-a-number"])
@pytest.mark.parametrize("offline", [False, True])
def test_a_bad_endpoint_is_a_usage_error_naming_the_variable(connections, monkeypatch, endpoint, why, offline):
    """Was urllib's bare ValueError (``Port out of range 0-65535``), which names no variable."""
    from ict.core.errors import UsageError

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    if offline:  # huggingface_hub fails to import all the same
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match=re.escape(f"HF_ENDPOINT={endpoint!r} is not a usable URL ({why}")):
        hub.hub_reachable()
    assert connections == []


def test_a_bad_endpoint_is_one_line_exit_2_before_transformers_is_imported(tmp_path):
    """The command stopped importing transformers (huggingface_hub reads HF_ENDPOINT on import):
    "Error importing huggingface_hub.file_download: Port out of range 0-65535", then that error."""
    env = {**os.environ, "HF_ENDPOINT": "http://localhost:99999", "PYTHONPATH": str(Path(__file__).parents[1])}
    result = subprocess.run([sys.executable, "-m", "ict", "train", "--model", "org/model", "--num-steps", "1",
                             "--run-dir", str(tmp_path / "run")], env=env, capture_output=True, text=True,
                            cwd=tmp_path, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: HF_ENDPOINT='http://localhost:99999' is not a usable URL")
    assert not (tmp_path / "run").exists()


def test_a_bad_endpoint_does_not_stop_ict_plot(tmp_path, monkeypatch, capsys):
    """`ict plot` reads run directories only: its own error, not HF_ENDPOINT's."""
    from ict.cli import main

    monkeypatch.setenv("HF_ENDPOINT", "http://localhost:99999")
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "HF_ENDPOINT" not in capsys.readouterr().err


@pytest.mark.parametrize("endpoint", ["localhost:8080", "hf-mirror.com", "127.0.0.1:9", "", "https://", "ftp://hf-mirror.example"])
def test_an_endpoint_without_http_or_https_and_a_host_is_a_usage_error(connections, monkeypatch, endpoint):
    """huggingface_hub puts HF_ENDPOINT before every file's path as it is, and each request then
    fails ("Request URL is missing an 'http://' or 'https://' protocol"); the check connected to
    huggingface.co:443 instead (``localhost:8080`` parses as scheme ``localhost``, no host)."""
    from ict.core.errors import UsageError

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(UsageError, match=re.escape(f"HF_ENDPOINT={endpoint!r} needs a scheme and a host, "
                                                   "http:// or https://")):
        hub.hub_reachable()
    assert connections == []


def test_an_endpoint_without_a_scheme_is_not_used_offline(connections, monkeypatch):
    """Offline no request is made: the cache serves, as with huggingface_hub itself."""
    monkeypatch.setenv("HF_ENDPOINT", "localhost:8080")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_reachable() is False and connections == []


def test_an_endpoint_without_a_scheme_does_not_stop_a_command_that_needs_no_hub(monkeypatch):
    """huggingface_hub imports with it: only a command that goes to the hub is refused."""
    from ict.cli import _run

    monkeypatch.setenv("HF_ENDPOINT", "localhost:8080")
    assert _run(argparse.Namespace(run=lambda args: 0), debug=False) == 0


def test_an_endpoint_without_a_scheme_is_one_line_exit_2_for_a_hub_model(connections, tmp_path, monkeypatch,
                                                                         capsys):
    """Was, offline, "couldn't connect to 'localhost:8080'" after checking huggingface.co; online,
    huggingface_hub's UnsupportedProtocol from every request."""
    from ict.cli import main

    monkeypatch.setenv("HF_ENDPOINT", "localhost:8080")
    assert main(["train", "--model", "org/model", "--num-steps", "1", "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == ("error: HF_ENDPOINT='localhost:8080' needs a scheme and a host, http:// or "
                                       "https:// (as in https://huggingface.co), or unset it\n")
    assert not (tmp_path / "run").exists()
