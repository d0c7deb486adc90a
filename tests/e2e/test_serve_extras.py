"""`mtcli serve` with the extras it can work with: CTranslate2's engine, and a real
LibreTranslate client (libretranslatepy) on the shipped models. In `make e2e`: each starts a
server of its own beside a test-only package."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import reference_translations
from tests.test_serve import _Server

pytestmark = pytest.mark.e2e


def test_serve_with_the_ctranslate2_engine(tmp_path, copy_model_dir, copy_lines):
    """`mtcli serve --engine ctranslate2` on an export answers as mtcli's engine does (greedy)."""
    pytest.importorskip("ctranslate2")
    from mtcli.store.ct2_export import export_ctranslate2

    exported = export_ctranslate2(copy_model_dir, tmp_path / "letters-ct2")
    server = _Server("--engine", "ctranslate2", "-m", str(exported), "--beam-size", "1")
    try:
        q = {"q": copy_lines[:3], "source": "en", "target": "en"}
        r = httpx.post(server.url + "/translate", json=q, timeout=30)
    finally:
        code, err = server.stop()
    assert r.status_code == 200 and r.json()["translatedText"] == reference_translations(
        copy_model_dir, copy_lines[:3], beam_size=1
    )
    assert code == 0, err


def test_a_libretranslate_client_talks_to_mtcli_serve():
    """libretranslatepy itself against `mtcli serve` with the shipped models: languages,
    translate, detect; source auto decides per line (the target language and languages no
    model knows pass through); HTML keeps its tags."""
    pytest.importorskip("libretranslatepy")
    from libretranslatepy import LibreTranslateAPI

    server = _Server()
    try:
        lt = LibreTranslateAPI(server.url)
        codes = {lang["code"]: lang["targets"] for lang in lt.languages()}
        assert codes == {"en": ["zh"], "zh": ["en"]}
        assert lt.translate("Why do we work?", "en", "zh") == "我们为什么工作？"  # reranked
        assert lt.detect("Wo ist der Bahnhof?")[0]["language"] == "de"
        assert lt.detect("我们为什么工作？") == [{"confidence": 100.0, "language": "zh"}]
        q = {"q": ["Hello.", "我们为什么工作？", "Wo ist der Bahnhof?"], "source": "auto", "target": "zh"}  # fmt: skip
        body = httpx.post(server.url + "/translate", json=q, timeout=30).json()
        assert body["translatedText"][1:] == q["q"][1:]  # already Chinese; German: no model
        assert [d["language"] for d in body["detectedLanguage"]] == ["en", "zh", "de"]
        html = {"q": "<p>Why do <b>we</b> work?</p>", "source": "en", "target": "zh", "format": "html"}  # fmt: skip
        out = httpx.post(server.url + "/translate", json=html, timeout=30).json()["translatedText"]
        assert out.startswith("<p>") and out.endswith("</p>") and out.count("<b>") == 1, out
        detected = httpx.post(
            server.url + "/detect", json={"q": ["Hi there, how are you?", "你好"]}
        ).json()
        assert [d[0]["language"] for d in detected] == ["en", "zh"]
    finally:
        code, err = server.stop()
    assert code == 0, err
