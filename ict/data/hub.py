"""The Hugging Face hub, when offline is likely: one reachability check before any download (of
data here, of a model in `ict.models.loading`)."""

from __future__ import annotations

import os
import socket
from urllib.parse import ParseResult, urlparse

from ict.core.errors import UsageError

_TRUE = ("1", "TRUE", "YES", "ON")  # huggingface_hub's ENV_VARS_TRUE_VALUES


def _endpoint() -> tuple[str, ParseResult]:
    """``$HF_ENDPOINT`` (default https://huggingface.co) and its parse. A value whose port or
    brackets do not parse (``http://localhost:99999``) is a one-line UsageError naming the
    variable: huggingface_hub, and so transformers, would fail to import."""
    raw = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        endpoint = urlparse(raw)
        endpoint.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as error:
        raise UsageError(f"HF_ENDPOINT={raw!r} is not a usable URL ({error}): give one such as "
                         "https://huggingface.co, or unset it") from None
    return raw, endpoint


def check_endpoint() -> None:
    """Refuse (one-line UsageError) a ``$HF_ENDPOINT`` that stops huggingface_hub importing;
    any command that may import transformers checks it first."""
    _endpoint()


def hub_address() -> tuple[str, int]:
    """The (host, port) of ``$HF_ENDPOINT`` (default huggingface.co:443; port 80 for plain http).
    A value that does not parse is a UsageError (`check_endpoint`), and so is one without an
    ``http://`` or ``https://`` scheme and a host (``localhost:8080``, ``hf-mirror.com``):
    huggingface_hub prefixes it to every file's address as it is and each request fails
    ("Request URL is missing an 'http://' or 'https://' protocol")."""
    raw, endpoint = _endpoint()
    if endpoint.scheme not in ("http", "https") or not endpoint.hostname:
        raise UsageError(f"HF_ENDPOINT={raw!r} needs a scheme and a host, http:// or https:// "
                         "(as in https://huggingface.co), or unset it")
    return endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80)


def hub_reachable(timeout_seconds: float = 3.0) -> bool:
    """Whether the hub endpoint (``$HF_ENDPOINT``, default huggingface.co) accepts a TCP
    connection: avoids minutes of retries on an offline machine. False when ``HF_HUB_OFFLINE``
    or ``HF_DATASETS_OFFLINE`` is true (``1``, ``true``, ``yes`` or ``on``, any case, as
    huggingface_hub reads them). A bad ``$HF_ENDPOINT`` is a UsageError (`hub_address`; offline,
    only one that stops huggingface_hub importing, `check_endpoint`: no request uses it)."""
    check_endpoint()  # an error offline too (huggingface_hub fails to import)
    if any(os.environ.get(name, "").strip().upper() in _TRUE for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    host, port = hub_address()
    try:
        with socket.create_connection((host, port), timeout=timeout_seconds):
            return True
    except OSError:
        return False


def go_offline() -> None:
    """Switch datasets and huggingface_hub to offline mode in this process (cached data loads)."""
    try:
        import datasets.config
        import huggingface_hub.constants

        datasets.config.HF_HUB_OFFLINE = True
        datasets.config.HF_DATASETS_OFFLINE = True
        huggingface_hub.constants.HF_HUB_OFFLINE = True
    except (ImportError, AttributeError):  # pragma: no cover - other library versions
        pass
