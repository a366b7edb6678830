"""The Hugging Face hub, when offline is likely: one reachability check before any download (of
data here, of a model in `ict.models.loading`)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

_TRUE = ("1", "TRUE", "YES", "ON")  # huggingface_hub's ENV_VARS_TRUE_VALUES


def hub_reachable(timeout_seconds: float = 3.0) -> bool:
    """Whether the hub endpoint (``$HF_ENDPOINT``, default huggingface.co) accepts a TCP
    connection: avoids minutes of retries on an offline machine. False when ``HF_HUB_OFFLINE``
    or ``HF_DATASETS_OFFLINE`` is true (``1``, ``true``, ``yes`` or ``on``, any case, as
    huggingface_hub reads them)."""
    if any(os.environ.get(name, "").strip().upper() in _TRUE for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (443 if endpoint.scheme != "http" else 80)
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
