"""`ict inspect` on a tiny random model: coloured spans, selections, HTML in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import pytest

from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _render(tiny_model_dir, tmp_path, color="entropy"):
    page = tmp_path / "view.html"
    assert main(["inspect", "--model", str(tiny_model_dir), "--prompt", "what is 1 + 2 ?",
                 "--n", "4", "--max-new-tokens", "10", "--color", color,
                 "--html", str(page)]) == 0
    return page


def test_html_has_a_coloured_span_per_token(tiny_model_dir, tmp_path, capsys):
    page = _render(tiny_model_dir, tmp_path).read_text()
    spans = re.findall(r"<span class='tok([^']*)' style='background:rgb\((\d+),(\d+),(\d+)\)' "
                       r"title='entropy=([0-9.]+)'>", page)
    assert len(spans) >= 4
    values = [float(s[4]) for s in spans]
    low, high = min(values), max(values)
    for _classes, red, green, _blue, value in spans:  # the shade follows the score (min..max)
        level = (float(value) - low) / (high - low)
        assert int(red) == 255 and abs(int(green) - int(255 - 200 * level)) <= 1
    # 20-Entropy marks the ceil(20%) highest-entropy tokens of the batch
    marked = sorted(float(s[4]) for s in spans if "entropy20" in s[0].split())
    assert marked and min(marked) >= sorted(values)[-len(marked)] - 1e-4
    assert any("ict" in s[0].split() for s in spans)
    assert "http" not in page and "<script" not in page  # self-contained
    assert "Jaccard(ICT, 20-Entropy)" in capsys.readouterr().out


def test_html_renders_in_headless_chromium(tiny_model_dir, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    page = _render(tiny_model_dir, tmp_path, color="js")
    shot = tmp_path / "shot.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={tempfile.mkdtemp()}",
                    f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
                   check=True, timeout=120, capture_output=True)
    assert shot.stat().st_size > 5_000
