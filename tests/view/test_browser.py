"""The view in headless Chromium: Model Explorer's page loads the graph, and its "Node data" table holds every
overlay's value for every op -- served by our local server (on 127.0.0.1, stopped at the end), and as the shared
page opened from disk with no server at all. Neither asks anything of another host."""

from __future__ import annotations

import socket
import urllib.parse

import pytest

import litert_torch
from tests.samples.conftest import headless_chromium
from tests.view.expected import ERROR, expected_values, labels

# The side panel's "Node data" table: one column per overlay, one row per node (op rows in op order).
READ_TABLE = """
const table = document.querySelector('node-data-provider-summary-panel .table-container.results table');
if (!table) return null;
return {
  names: [...table.querySelectorAll('thead th.value-col .stat-label')].map(e => e.textContent.trim()),
  rows: [...table.querySelectorAll('tbody tr')].map(tr => [
    tr.querySelector('td.node-label').textContent.trim(),
    ...[...tr.querySelectorAll('td.value-col')].map(td => td.textContent.trim())]),
};
"""


@pytest.fixture(scope="module")
def browser():
    with headless_chromium("1400,900", console_log=True) as driver:
        yield driver


def shown_table(driver, overlays: int, timeout: float = 60) -> dict:
    """The Node data table once the page has loaded the graph and all `overlays` (values filled in)."""
    from selenium.webdriver.support.ui import WebDriverWait

    def ready(d):
        table = d.execute_script(READ_TABLE)
        rows = (table or {}).get("rows", [])
        return table if table and len(table["names"]) == overlays and any(r[1] != "-" for r in rows) else None

    return WebDriverWait(driver, timeout).until(ready)


def check_every_op(table: dict, edge, report=None) -> None:
    expected = expected_values(edge, report)
    ops = [row for row in table["rows"] if row[0] not in ("GraphInputs", "GraphOutputs")]
    assert [row[0] for row in ops] == labels(edge)  # the graph: every op, in order
    for row, want in zip(ops, expected):
        shown = dict(zip(table["names"], row[1:]))
        assert set(shown) == set(want), (shown, want)
        for name, value in want.items():
            if name == ERROR:
                assert float(shown[name]) == pytest.approx(value, rel=1e-9)
            else:
                assert shown[name] == value, (name, shown[name], value)


def off_host_requests(driver, allowed: set[str]) -> list[str]:
    """Requests of the page (loads, and failed loads the console reports) to hosts outside `allowed`."""
    loaded = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    logged = [e["message"].split(" ")[0] for e in driver.get_log("browser") if e.get("source") == "network"]
    return [u for u in loaded + logged
            if urllib.parse.urlsplit(u).scheme in ("http", "https") and urllib.parse.urlsplit(u).netloc not in allowed]


def test_the_served_view_shows_every_overlay_on_every_op(browser, converted, model_explorer):
    module, args, edge = converted
    view = litert_torch.view(edge, module=module, sample_args=args, port=0, open_browser=False)
    try:
        assert view.host == "127.0.0.1" and view.report.passed
        browser.get(view.url)
        table = shown_table(browser, 6)
        check_every_op(table, edge, view.report)
        assert off_host_requests(browser, {f"127.0.0.1:{view.port}"}) == []
    finally:
        view.stop()
    with pytest.raises(OSError):  # stopped: nothing listens on the port any more
        socket.create_connection(("127.0.0.1", view.port), timeout=2).close()


def test_the_shared_page_opens_from_disk_with_every_overlay(browser, converted, report, tmp_path, model_explorer):
    _, _, edge = converted
    page = edge.export_view(tmp_path / "shared", report=report)
    browser.get(f"file://{page}")
    table = shown_table(browser, 6)
    check_every_op(table, edge, report)
    assert off_host_requests(browser, set()) == []
    assert browser.execute_script("return document.querySelectorAll('script[src], link[href]').length") == 0
