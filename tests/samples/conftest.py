"""Fixtures for the sample-app tests: a virtual X display, a headless Chromium, and the artifacts folder.

The apps need programs outside Python (Xvfb, Debian's chromium and chromedriver, LiteRT.js from npm). Where one
is missing the test is skipped with the command that installs it — unless LITERT_SAMPLE_TESTS=require (as
.ci/run sets), where a missing tool fails the test instead, so that CI cannot pass without running the apps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = os.path.join(ROOT, "samples", "shapes")
ARTIFACTS = os.path.join(ROOT, "artifacts", "samples")


def need(ok: bool, what: str) -> None:
    if ok:
        return
    if os.environ.get("LITERT_SAMPLE_TESTS") == "require":
        pytest.fail(f"missing {what} (LITERT_SAMPLE_TESTS=require)")
    pytest.skip(f"missing {what}")


@pytest.fixture(scope="session")
def artifacts() -> str:
    """Where the tests leave screenshots for people to look at (artifacts/samples, not committed)."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="module")
def x_display():
    """A fresh Xvfb server; yields its DISPLAY string."""
    need(shutil.which("Xvfb") is not None, "Xvfb (apt-get install xvfb)")
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as f:
        number = f.readline().strip()
    if not number:
        proc.kill()
        pytest.fail("Xvfb started but did not report a display number")
    try:
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def headless_chromium(window_size: str = "480,900", console_log: bool = False, webgpu: bool = False):
    """A headless Chromium driven through chromedriver (selenium), quit when the block ends; skipped (or failed
    under LITERT_SAMPLE_TESTS=require) when Chromium, its driver or selenium is missing. With `console_log`,
    `driver.get_log("browser")` returns the page's console and network errors. With `webgpu`, pages get WebGPU
    (`navigator.gpu`) on SwiftShader, the software Vulkan device Debian's chromium ships, whatever GPU the
    machine has."""
    need(shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
         "chromium and chromedriver (apt-get install chromium chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        need(False, "selenium (pip install -e '.[test]')")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-quic", f"--window-size={window_size}"):
        options.add_argument(flag)
    if webgpu:
        # Headless Chromium on Linux offers WebGPU only when asked; the adapter is named so that a machine with a
        # GPU runs the same software device as one without.
        for flag in ("--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader"):
            options.add_argument(flag)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium driven through chromedriver (selenium); closed after the module."""
    with headless_chromium() as driver:
        yield driver
