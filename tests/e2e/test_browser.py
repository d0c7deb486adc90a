"""The web page in a real browser: headless Chromium (Debian's chromium and chromium-driver)
driven by selenium loads /, types a sentence, and waits for Chinese and a drawn heatmap.

Runs with `make e2e` (and in .ci/run), not in `make test`: it needs the browser packages.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.test_serve import _Server

pytestmark = pytest.mark.e2e


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    driver_path = shutil.which("chromedriver")
    assert driver_path, "chromedriver is missing: apt-get install chromium chromium-driver"
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,900"):  # fmt: skip
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    yield driver
    driver.quit()


def _ready_page(browser, server):
    """The server's page open and its models loaded; a wait of up to 60 s for what follows."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda b: b.find_element(By.ID, "status").text == "ready")
    return wait


def test_the_page_translates_as_you_type_and_draws_attention(browser, tmp_path):
    """Typing "Why do we work?" into the page shows Chinese, n-best scores and a heatmap."""
    from selenium.webdriver.common.by import By

    server = _Server("-m", "en-zh-tiny")
    try:
        wait = _ready_page(browser, server)
        browser.find_element(By.ID, "source").send_keys("Why do we work?")
        wait.until(
            lambda b: any(
                "\u4e00" <= ch <= "\u9fff" for ch in b.find_element(By.ID, "translation").text
            )
        )
        wait.until(lambda b: b.find_element(By.ID, "heatmap").get_attribute("data-drawn") == "true")
        painted = browser.execute_script(
            "const c = document.getElementById('heatmap');"
            "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n;"
        )
        assert painted > 1000  # the canvas holds a drawing, not just a size
        assert len(browser.find_elements(By.CSS_SELECTOR, "#nbest li")) >= 2
        shot = Path(os.environ.get("MTCLI_SCREENSHOT", tmp_path / "page.png"))
        browser.save_screenshot(str(shot))
        print("translation:", browser.find_element(By.ID, "translation").text, "screenshot:", shot)
    finally:
        server.stop()


def test_the_page_asks_for_the_key_a_server_needs(browser):
    """With --api-key the page's first translation gets a 403 with a reason: it shows a key
    field, and once the key is typed the translation appears."""
    from selenium.webdriver.common.by import By

    server = _Server("-m", "en-zh-tiny", "--api-key", "s3cret")
    try:
        wait = _ready_page(browser, server)
        browser.find_element(By.ID, "source").send_keys("Why do we work?")
        wait.until(lambda b: b.find_element(By.ID, "key").is_displayed())
        assert "key" in browser.find_element(By.ID, "error").text
        browser.find_element(By.ID, "key").send_keys("s3cret")
        wait.until(
            lambda b: any(
                "\u4e00" <= ch <= "\u9fff" for ch in b.find_element(By.ID, "translation").text
            )
        )
    finally:
        server.stop()


def test_the_page_marks_the_lines_the_model_is_unsure_of(browser):
    """A line the shipped model knows and one far from its 25k short sentences: only the far
    one's translation is marked unsure (its class, a title with its confidence), and the page
    says how many lines it marked."""
    from selenium.webdriver.common.by import By

    server = _Server("-m", "en-zh-tiny")
    try:
        wait = _ready_page(browser, server)
        far = "The city council voted on Tuesday to postpone the budget hearing until the audit is complete."
        browser.find_element(By.ID, "source").send_keys("Do you have a pencil?\n" + far)
        wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#translation .unsure"))
        lines = browser.find_elements(By.CSS_SELECTOR, "#translation span")
        assert len(lines) == 2 and "unsure" not in (lines[0].get_attribute("class") or "")
        assert lines[1].get_attribute("class") == "unsure"
        assert lines[1].get_attribute("title").startswith("confidence 0.")
        note = browser.find_element(By.ID, "unsure-note")
        assert note.is_displayed() and note.text.startswith("1 line marked")
        browser.find_element(By.ID, "source").clear()
        browser.find_element(By.ID, "source").send_keys("Do you have a pencil?")
        wait.until(lambda b: not b.find_elements(By.CSS_SELECTOR, "#translation .unsure"))
        assert not browser.find_element(By.ID, "unsure-note").is_displayed()
    finally:
        server.stop()


def test_the_files_tab_translates_a_subtitle_file(browser, tmp_path):
    """The Files tab (shown because /frontend/settings says files are translated): an .srt
    chosen in the file input and sent comes back as a download link whose file has the
    cue's timing as it was and Chinese text; the link works once."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    film = tmp_path / "film.srt"
    film.write_text("1\n00:00:01,000 --> 00:00:02,500\nWhy do we work?\n", encoding="utf-8")
    server = _Server("-m", "en-zh-tiny")
    try:
        wait = _ready_page(browser, server)
        wait.until(lambda b: b.find_element(By.ID, "tab-files").is_displayed())
        browser.find_element(By.ID, "tab-files").click()
        assert ".srt" in browser.find_element(By.ID, "file").get_attribute("accept")
        browser.find_element(By.ID, "send-file").click()  # no pair, no file: said so
        assert "choose a file" in browser.find_element(By.ID, "file-error").text
        Select(browser.find_element(By.ID, "pair")).select_by_value("en|zh")
        browser.find_element(By.ID, "file").send_keys(str(film))
        browser.find_element(By.ID, "send-file").click()
        wait.until(lambda b: b.find_element(By.ID, "download").is_displayed())
        link = browser.find_element(By.ID, "download")
        assert link.get_attribute("download") == "film.srt"
        assert "1 string translated" in browser.find_element(By.ID, "file-status").text
        fetch = (
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0]).then(async r => done([r.status, await r.text()]));"
        )
        status, text = browser.execute_async_script(fetch, link.get_attribute("href"))
        assert status == 200 and text.startswith("1\n00:00:01,000 --> 00:00:02,500\n")
        assert any("\u4e00" <= ch <= "\u9fff" for ch in text)
        assert browser.execute_async_script(fetch, link.get_attribute("href"))[0] == 404
    finally:
        server.stop()


def test_the_page_links_to_the_walk_through_of_the_first_line(browser, tmp_path):
    """Once "Why do we work?" is translated, the page's link opens /explain for it: every step's
    heading, the numbers in tables, the attention as shaded heatmap cells."""
    from selenium.webdriver.common.by import By

    server = _Server("-m", "en-zh-tiny")
    try:
        wait = _ready_page(browser, server)
        browser.find_element(By.ID, "source").send_keys("Why do we work?")
        wait.until(lambda b: b.find_element(By.ID, "explain").is_displayed())
        browser.get(browser.find_element(By.ID, "explain").get_attribute("href"))
        wait.until(
            lambda b: "5. What the model learned" in b.find_element(By.TAG_NAME, "body").text
        )
        headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
        assert [h.split(".")[0] for h in headings] == ["1", "2", "3", "4", "5"]
        assert len(browser.find_elements(By.TAG_NAME, "table")) > 20
        shaded = browser.find_elements(By.CSS_SELECTOR, "td[style*='rgba']")
        assert len(shaded) >= 36  # at least the 6 x 6 softmax of "Why do we work?"
        assert "Translation:" in browser.find_element(By.TAG_NAME, "body").text
        shot = Path(os.environ.get("MTCLI_SCREENSHOT_EXPLAIN", tmp_path / "explain.png"))
        browser.save_screenshot(str(shot))
        print("explain page:", browser.current_url, "screenshot:", shot)
    finally:
        server.stop()
