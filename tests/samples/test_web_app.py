"""The web sample in headless Chromium with LiteRT.js from npm: uploading an image gives the Python EdgeModel's
scores."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.samples.conftest import ROOT, need
from tests.samples.reference import edge_scores, example_images, labels

WEB = os.path.join(ROOT, "samples", "web")


@pytest.fixture(scope="module")
def page(chromium):
    need(os.path.isdir(os.path.join(WEB, "node_modules", "@litertjs", "core")),
         "LiteRT.js (npm ci --prefix samples/web)")
    import sys

    sys.path.insert(0, WEB)
    try:
        import serve
    finally:
        sys.path.remove(WEB)
    server, url = serve.serve_in_background()
    try:
        yield chromium, url
    finally:
        server.shutdown()


def wait_state(driver, states, timeout=60):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.dataset.state") in states)
    return driver.execute_script("return document.body.dataset.state")


def test_uploaded_images_get_the_edge_models_scores(page, artifacts):
    from selenium.webdriver.common.by import By

    driver, url = page
    driver.get(url)
    assert wait_state(driver, ("ready", "error")) == "ready", driver.find_element(By.ID, "status").text
    names = labels()
    # The WASM runtime is assumed local: nothing on the page may come from another host.
    hosts = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => new URL(e.name).host)")
    assert set(hosts) <= {url.split("//")[1]}, hosts
    for path in example_images():
        driver.execute_script("document.body.dataset.state = 'waiting'")
        driver.find_element(By.ID, "file").send_keys(path)
        assert wait_state(driver, ("done", "error")) == "done", driver.find_element(By.ID, "status").text
        result = driver.execute_script("return window.lastResult")
        expected = edge_scores(path)
        np.testing.assert_allclose(result["scores"], expected, atol=1e-4)
        shown = [li.find_element(By.CLASS_NAME, "label").text for li in driver.find_elements(By.CSS_SELECTOR, "#top5 li")]
        assert shown == [names[i] for i in np.argsort(-expected)[:5]]
        assert shown[0] == os.path.splitext(os.path.basename(path))[0]
        assert driver.find_element(By.ID, "latency").text.startswith("latency: ")
    driver.save_screenshot(os.path.join(artifacts, "web_app.png"))


def test_example_buttons_classify_too(page):
    from selenium.webdriver.common.by import By

    driver, url = page
    driver.get(url)
    assert wait_state(driver, ("ready", "error")) == "ready"
    buttons = driver.find_elements(By.CSS_SELECTOR, "#examples button")
    assert [b.text for b in buttons] == [os.path.splitext(os.path.basename(p))[0] for p in example_images()]
    buttons[-1].click()
    assert wait_state(driver, ("done", "error")) == "done"
    np.testing.assert_allclose(driver.execute_script("return window.lastResult")["scores"],
                               edge_scores(example_images()[-1]), atol=1e-4)


def test_a_file_that_is_not_an_image_is_reported(page, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver, url = page
    driver.get(url)
    assert wait_state(driver, ("ready", "error")) == "ready"
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    driver.find_element(By.ID, "file").send_keys(str(bad))
    WebDriverWait(driver, 30).until(lambda d: "not an image" in d.find_element(By.ID, "status").text)
