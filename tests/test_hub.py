"""The hub reachability check (`ict.data.hub`): which endpoint it connects to, and offline mode."""

from __future__ import annotations

import contextlib
import socket

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
