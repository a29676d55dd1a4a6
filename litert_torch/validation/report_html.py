"""A ValidationReport as one self-contained HTML page (inline CSS and SVG, nothing fetched)."""

from __future__ import annotations

import math
from html import escape
from typing import Any

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP, PAD_RIGHT = 900, 300, 60, 40, 20, 20
LOG_FLOOR = -12.0  # errors below 1e-12 (and exact zeros) sit on the floor


def _log_error(value: float) -> float:
    return max(math.log10(value), LOG_FLOOR) if value > 0 else LOG_FLOOR


def layer_plot(report: Any) -> str:
    """An SVG line plot of log10(relative error) per matched layer, the tolerance as a dashed line, and the
    first divergent layer marked."""
    layers = report.layers
    if not layers:
        note = escape(report.divergence_note or "no per-layer comparison was run (the model passed)")
        return f'<p class="note">{note}</p>'
    top = max(0.0, max(_log_error(layer.relative_error) for layer in layers))
    bottom = min(LOG_FLOOR, math.floor(min(_log_error(layer.relative_error) for layer in layers)))
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(i: int) -> float:
        return PAD_LEFT + (plot_w * i / max(len(layers) - 1, 1))

    def y(value: float) -> float:
        return PAD_TOP + plot_h * (top - value) / (top - bottom)

    parts = [f'<svg class="plot" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="relative error per layer">']
    for tick in range(int(bottom), int(top) + 1, 2):
        parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                     'class="grid"/>')
        parts.append(f'<text x="{PAD_LEFT - 8}" y="{y(tick) + 4:.1f}" class="axis" text-anchor="end">1e{tick}</text>')
    tolerance = _log_error(report.rtol)
    parts.append(f'<line x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(tolerance):.1f}" y2="{y(tolerance):.1f}" '
                 'class="tolerance"/>')
    parts.append(f'<text x="{WIDTH - PAD_RIGHT}" y="{y(tolerance) - 6:.1f}" class="axis" text-anchor="end">'
                 f'tolerance (rtol {report.rtol:g})</text>')
    points = " ".join(f"{x(i):.1f},{y(_log_error(layer.relative_error)):.1f}" for i, layer in enumerate(layers))
    parts.append(f'<polyline points="{points}" class="series"/>')
    for i, layer in enumerate(layers):
        cls = "ok" if layer.passed else "bad"
        title = escape(f"{layer.node} ({layer.opcode}): {layer.relative_error:.2e}")
        parts.append(f'<circle cx="{x(i):.1f}" cy="{y(_log_error(layer.relative_error)):.1f}" r="3" class="{cls}">'
                     f"<title>{title}</title></circle>")
    if report.divergence is not None:
        index = next((i for i, layer in enumerate(layers) if layer.op_index == report.divergence.op_index), None)
        if index is not None:
            cx, cy = x(index), y(_log_error(layers[index].relative_error))
            anchor = "end" if cx > WIDTH / 2 else "start"
            dx = -10 if anchor == "end" else 10
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="7" class="marker"/>')
            parts.append(f'<text x="{cx + dx:.1f}" y="{cy - 10:.1f}" class="label" text-anchor="{anchor}">'
                         f"first divergent: {escape(report.divergence.node)}</text>")
    parts.append(f'<text x="{PAD_LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8}" class="axis" text-anchor="middle">'
                 f"layers in op order ({len(layers)} matched to PyTorch nodes)</text>")
    parts.append("</svg>")
    return "".join(parts)


def _outputs_table(report: Any) -> str:
    rows = []
    for backend in report.backends:
        if backend.status != "ran":
            rows.append(f"<tr><td>{escape(backend.backend)}</td><td colspan='8' class='note'>skipped: "
                        f"{escape(backend.reason or '')}</td></tr>")
            continue
        for o in backend.outputs:
            topk = "–" if o.top1_agreement is None else f"{o.top1_agreement:.0%} / {o.top5_agreement:.0%}"
            verdict = '<span class="pass">pass</span>' if o.passed else '<span class="fail">FAIL</span>'
            rows.append(
                f"<tr><td>{escape(backend.backend)}</td><td>{escape(o.name)}</td><td>{escape(str(o.shape))}</td>"
                f"<td>{o.max_abs_error:.2e}</td><td>{o.max_rel_error:.2e}</td><td>{o.mean_abs_error:.2e}</td>"
                f"<td>{o.cosine:.6f}</td><td>{topk}</td><td>{verdict}</td></tr>")
    return ("<table><thead><tr><th>backend</th><th>output</th><th>shape</th><th>max abs err</th>"
            "<th>max rel err</th><th>mean abs err</th><th>cosine</th><th>top-1 / top-5</th><th></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _layers_table(report: Any, limit: int = 400) -> str:
    if not report.layers:
        return ""
    rows = []
    for layer in report.layers[:limit]:
        cls = "" if layer.passed else ' class="badrow"'
        rows.append(f"<tr{cls}><td>{layer.op_index}</td><td>{escape(layer.node)}</td><td>{escape(layer.target)}</td>"
                    f"<td>{escape(layer.opcode)}</td><td class='num'>{layer.relative_error:.2e}</td>"
                    f"<td class='src'>{escape(layer.location or '')}</td></tr>")
    more = f"<p class='note'>{len(report.layers) - limit} more layers in the JSON report.</p>" \
        if len(report.layers) > limit else ""
    return ("<h2>Layers</h2><table><thead><tr><th>op</th><th>value of node</th><th>op lowered from</th>"
            f"<th>TFLite op</th><th>rel err</th><th>source</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f"{more}")


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2327;max-width:1100px}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:600}

table{border-collapse:collapse;width:100%;font-size:13px} th,td{padding:4px 8px;border-bottom:1px solid #e5e7eb;
text-align:left} th{background:#f6f8fa} td:nth-child(n+4){font-variant-numeric:tabular-nums}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}.note{color:#57606a}
.verdict.pass{background:#1a7f37;color:#fff}.verdict.fail{background:#cf222e;color:#fff}
.verdict.inconclusive{background:#9a6700;color:#fff}
.badrow td{background:#ffebe9} .src{word-break:break-all;font-size:12px} .num{white-space:nowrap} .callout{border-left:4px solid #cf222e;background:#fff5f5;padding:8px 12px;margin:12px 0}
.plot .grid{stroke:#eaeef2}.plot .axis{font-size:11px;fill:#57606a}.plot .tolerance{stroke:#cf222e;stroke-dasharray:6 4}
.plot .series{fill:none;stroke:#0969da;stroke-width:1.5}.plot .ok{fill:#0969da}.plot .bad{fill:#cf222e}
.plot .marker{fill:none;stroke:#cf222e;stroke-width:2}.plot .label{font-size:12px;fill:#cf222e;font-weight:600}
"""


def render_html(report: Any) -> str:
    verdict = getattr(report, "verdict", "PASS" if report.passed else "FAIL").lower()
    warnings = "".join(f'<div class="callout"><b>Warning:</b> {escape(w)}</div>'
                       for w in getattr(report, "warnings", []))
    callout = ""
    if report.divergence is not None:
        d = report.divergence
        callout = (f'<div class="callout"><b>First divergent node:</b> <code>{escape(d.node)}</code> '
                   f"({escape(d.target)}), lowered to <code>{escape(d.opcode)}</code> (op {d.op_index}): relative "
                   f"error {d.relative_error:.2e}, after at most {d.previous_error:.2e} before it.<br>"
                   f"at <code>{escape(d.location or 'unknown source line')}</code>"
                   + (f" in module <code>{escape(d.module)}</code>" if d.module else "") + "</div>")
    elif report.divergence_note:
        callout = f'<p class="note">{escape(report.divergence_note)}</p>'
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>Validation: {verdict.upper()}</title><style>{STYLE}</style></head><body>"
        f"<h1>Edge model validation <span class='verdict {verdict}'>{verdict.upper()}</span></h1>"
        f"<p class='note'>Reference: {escape(report.reference)} on {report.inputs} input set(s); an output passes "
        f"when max|edge − ref| ≤ {report.rtol:g} · max|ref| + {report.atol:g}.</p>"
        f"{warnings}<h2>Outputs</h2>{_outputs_table(report)}{callout}"
        f"<h2>Relative error per layer (reference kernels)</h2>{layer_plot(report)}"
        f"{_layers_table(report)}</body></html>\n"
    )
