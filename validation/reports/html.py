"""One self-contained HTML page: the verdict up top, a plot per metric, then every node.

Each plot ranks the nodes by the metric, worst on the left, and draws the fleet median, the
absolute limit and the outlier threshold, with rejected nodes marked in red and the ones this
metric rejected named. Plots are inline SVG made by matplotlib (the `report` extra), imported
only here and only when a page is asked for; without it the CLI exits 69 naming the extra.
Big fleets rasterize their points inside the SVG so the page stays a few hundred KiB.

Node names, metric names and reasons are the nodes' words: every one is HTML-escaped, and the
plots turn matplotlib's mathtext off, so a name such as `$\\frac{1}{0}$` is drawn as typed rather
than parsed (a name mathtext cannot parse would otherwise abort the whole report).
"""

from __future__ import annotations

import io
from html import escape
from typing import TYPE_CHECKING

from validation.gate import GateResult, MetricStats, NodeVerdict
from validation.reports import visible

if TYPE_CHECKING:
    from matplotlib.axes import Axes

EXTRA = "report"
_RASTER_AT = 2000  # points per plot above which the scatter is embedded as an image
_LABEL_TICKS_UP_TO = 48  # nodes per plot up to which the x axis names every node
_NAMED = 8  # rejected nodes annotated by name per plot

OK, BAD, MUTED, MEDIAN, LIMIT, OUTLIER = "#2b6cb0", "#c53030", "#a0aec0", "#2f855a", "#c53030", "#dd6b20"


class MissingExtraError(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            f"--html needs matplotlib, which is not installed; install the `{EXTRA}` extra: "
            f"pip install 'fleetforge[{EXTRA}]'"
        ) from None


def _plot(result: GateResult, stats: MetricStats) -> str:
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    metric = stats.metric
    points = [(v.metrics[metric], v) for v in result.nodes if metric in v.metrics]
    # Worst first: ascending for higher-is-better, descending for lower-is-better.
    points.sort(key=lambda p: p[0], reverse=not stats.higher_is_better)
    xs = list(range(len(points)))
    ys = [p[0] for p in points]
    hit = [any(r.metric == metric for r in v.reasons) for _, v in points]
    rejected = [not v.accepted for _, v in points]
    with rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": f"fleetforge-{metric}",
            "font.size": 9,
            "text.parse_math": False,  # labels are data, never mathtext
            "text.usetex": False,
        }
    ):
        fig = Figure(figsize=(8.0, 3.3), layout="constrained")
        ax = fig.add_subplot()
        raster = len(points) > _RASTER_AT
        groups = (
            ("accepted", OK, "o", [not r for r in rejected]),
            (
                "rejected (other reason)",
                MUTED,
                "X",
                [r and not h for r, h in zip(rejected, hit, strict=True)],
            ),
            (visible(f"rejected on {metric}"), BAD, "X", hit),
        )
        for label, color, marker, mask in groups:
            gx = [x for x, m in zip(xs, mask, strict=True) if m]
            gy = [y for y, m in zip(ys, mask, strict=True) if m]
            if gx:
                size = 14 if raster else (46 if marker == "X" else 30)
                ax.scatter(gx, gy, s=size, c=color, marker=marker, label=label, zorder=3, rasterized=raster)
        _lines(ax, stats)
        named = [(x, y, v.node) for x, y, (_, v), h in zip(xs, ys, points, hit, strict=True) if h][:_NAMED]
        for x, y, name in named:
            ax.annotate(
                visible(name), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8, color=BAD
            )
        if len(points) <= _LABEL_TICKS_UP_TO:
            ax.set_xticks(xs, [visible(v.node) for _, v in points], rotation=90, fontsize=7)
        else:
            ax.set_xlabel(f"{len(points)} nodes, ranked worst to best")
        unit = f" ({stats.unit})" if stats.unit else ""
        direction = "higher is better" if stats.higher_is_better else "lower is better"
        ax.set_title(visible(f"{metric}{unit}: {direction}"), loc="left", fontsize=10)
        ax.grid(axis="y", color="#e2e8f0", linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        # Beside the plot, never over the points it explains.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _lines(ax: Axes, stats: MetricStats) -> None:
    if stats.median is not None:
        ax.axhline(stats.median, color=MEDIAN, linewidth=1.2, label=f"median {stats.median:.4g}")
    if stats.limit is not None:
        kind = "floor" if stats.higher_is_better else "ceiling"
        ax.axhline(stats.limit, color=LIMIT, linestyle="--", linewidth=1.2, label=f"{kind} {stats.limit:.4g}")
    if stats.outlier_threshold is not None:
        ax.axhline(
            stats.outlier_threshold,
            color=OUTLIER,
            linestyle=":",
            linewidth=1.5,
            label=f"outlier threshold {stats.outlier_threshold:.4g}",
        )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1a202c;max-width:1400px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:28px 0 8px}
.banner{padding:14px 18px;border-radius:6px;font-size:18px;font-weight:600;color:#fff}
.ok{background:#2f855a}.bad{background:#c53030}.warn{background:#b7791f}
.facts{color:#4a5568;margin:8px 0}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f7fafc}
.reject{color:#c53030;font-weight:600}.accept{color:#2f855a;font-weight:600}
.rule{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#fed7d7;color:#822727;margin-right:4px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(660px,1fr));gap:12px}
.plot{border:1px solid #e2e8f0;border-radius:6px;padding:6px}
.plot svg{width:100%;height:auto}
.note{color:#744210}
code{font-size:12px}
"""


def _text(value: str) -> str:
    """Data as HTML text: characters that do not print made visible, then HTML-escaped."""
    return escape(visible(value))


def _banner(result: GateResult) -> tuple[str, str]:
    f = result.fleet
    n_acc, n_rej = len(f.accepted), len(f.rejected)
    if f.ready is True:
        return "ok", (
            f"READY: {n_acc} of {f.judged} nodes accepted; the job needs {f.required}, {len(f.spare)} spare(s) left"
        )
    if f.ready is False:
        return "bad", f"NOT READY: {n_acc} nodes accepted, the job needs {f.required} ({n_rej} rejected)"
    if n_rej == 0:
        return "ok", f"ALL ACCEPTED: {n_acc} of {f.judged} nodes"
    return "bad", f"{n_rej} of {f.judged} nodes REJECTED; {n_acc} accepted"


def _reasons_cell(v: NodeVerdict) -> str:
    return "<br>".join(f'<span class="rule">{_text(r.rule)}</span>{_text(r.message)}' for r in v.reasons)


def render_html(result: GateResult) -> str:
    require_matplotlib()
    f = result.fleet
    kind, banner = _banner(result)
    rules = result.settings
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>fleetforge gate: {_text(f.sku or 'results')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>fleetforge gate{': ' + _text(f.name) if f.name else ''} ({_text(f.sku or 'unknown SKU')})</h1>",
        f'<div class="banner {kind}">{_text(banner)}</div>',
        '<p class="facts">'
        + _text(
            f"Outlier rule: below the median by more than {rules.mad_k:g} x MAD (scaled by 1.4826) and by more "
            f"than {rules.min_relative_margin:.0%} of the median (mirrored for lower-is-better metrics); "
            f"fleet statistics from {rules.min_fleet} nodes up. Floors: SKU reference x fraction."
        )
        + "</p>",
    ]
    if result.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f'<li class="note">{_text(n)}</li>' for n in result.notes]
        parts.append("</ul>")
    rejected = [v for v in result.nodes if not v.accepted]
    if rejected:
        parts.append(
            f"<h2>Rejected nodes ({len(rejected)})</h2><table><tr><th>node</th><th>reasons</th></tr>"
        )
        parts += [f"<tr><td>{_text(v.node)}</td><td>{_reasons_cell(v)}</td></tr>" for v in rejected]
        parts.append("</table>")
    plotted = [s for s in result.stats.values() if s.n > 0]
    if plotted:
        parts.append(f'<h2>Metrics ({len(plotted)})</h2><div class="plots">')
        parts += [f'<div class="plot" id="plot-{_text(s.metric)}">{_plot(result, s)}</div>' for s in plotted]
        parts.append("</div>")
    parts.append(
        "<h2>Every node</h2><table><tr><th>node</th><th>verdict</th><th>role</th><th>pace</th>"
        "<th>run</th><th>reasons</th></tr>"
    )
    for v in result.nodes:
        pace = f"{v.pace:.3f}" if v.pace is not None else ""
        parts.append(
            f'<tr><td>{_text(v.node)}</td><td class="{v.verdict}">{v.verdict}</td>'
            f"<td>{_text(v.role or '')}</td><td>{pace}</td><td><code>{_text(v.run_id or '')}</code></td>"
            f"<td>{_reasons_cell(v)}</td></tr>"
        )
    parts.append("</table>")
    damaged = [r for r in result.files if r.bad_lines]
    if damaged:
        parts.append(
            "<h2>Files with unreadable lines</h2><table><tr><th>file</th><th>line</th><th>problem</th></tr>"
        )
        for report in damaged:
            parts += [
                f"<tr><td><code>{_text(report.path)}</code></td><td>{n}</td><td>{_text(p)}</td></tr>"
                for n, p in report.bad_lines
            ]
        parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
