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


@pytest.fixture(scope="module")
def webgpu_page(page):
    """The same server, in a Chromium that offers WebGPU (SwiftShader's, see conftest.headless_chromium)."""
    from tests.samples.conftest import headless_chromium

    with headless_chromium(webgpu=True) as driver:
        yield driver, page[1]


def test_webgpu_gives_the_wasm_paths_scores_within_the_gpus_precision(webgpu_page):
    """The menu's WebGPU choice runs the model on LiteRT.js's WebGPU accelerator (the scores come back from a GPU
    buffer, so nothing fell back to WASM), and for every bundled image its scores are the WASM path's within
    1e-5 (measured on SwiftShader, which has no shader-f16, so the GPU computes in float32: at most 1.2e-7)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver, url = webgpu_page
    driver.get(url)  # WebGPU is offered to secure contexts (localhost is one), not to the blank start page
    adapter = driver.execute_async_script(
        "const done = arguments[0]; navigator.gpu.requestAdapter().then(a => done(a && a.info.architecture))")
    assert adapter == "swiftshader"
    scores = {}
    for accelerator in ("wasm", "webgpu"):
        driver.get(url)
        assert wait_state(driver, ("ready", "error")) == "ready", driver.find_element(By.ID, "status").text
        if accelerator == "webgpu":  # chosen the way a user does: the menu reloads the page with it
            Select(driver.find_element(By.ID, "accelerator")).select_by_value("webgpu")
            WebDriverWait(driver, 30).until(lambda d: "accelerator=webgpu" in d.current_url)
            assert wait_state(driver, ("ready", "error")) == "ready", driver.find_element(By.ID, "status").text
        assert driver.find_element(By.ID, "accelerator").get_attribute("value") == accelerator
        assert driver.find_element(By.ID, "runtime").text == {"wasm": "WebAssembly (XNNPACK)", "webgpu": "WebGPU"}[
            accelerator]
        for path in example_images():
            driver.execute_script("document.body.dataset.state = 'waiting'")
            driver.find_element(By.ID, "file").send_keys(path)
            assert wait_state(driver, ("done", "error")) == "done", driver.find_element(By.ID, "status").text
            result = driver.execute_script("return window.lastResult")
            assert result["accelerator"] == accelerator
            scores.setdefault(accelerator, []).append(result["scores"])
    for path, wasm, webgpu in zip(example_images(), scores["wasm"], scores["webgpu"]):
        np.testing.assert_allclose(webgpu, wasm, atol=1e-5, rtol=0, err_msg=path)
        assert np.argmax(webgpu) == np.argmax(wasm)
