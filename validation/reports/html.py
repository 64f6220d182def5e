"""One self-contained HTML page: the verdict up top, a plot per metric, then every node.

A provenance line (fleetforge version, when, which inputs, which spec) heads the page. Each plot
ranks the nodes by the metric, worst on the left, and draws the fleet median, the absolute limit
and the outlier threshold, with rejected nodes marked in red; the ones this metric rejected carry
their number in the rejected-nodes table, set in a lane above the plot with a leader line so
labels never overlap however many nodes crowd the worst end. Counts get integer axes. The
every-node table lists rejects first, folds the accepted rows away, and sorts by any column. Plots are inline SVG made by matplotlib (the `report` extra), imported
only here and only when a page is asked for; without it the CLI exits 69 naming the extra.
Big fleets rasterize their points inside the SVG so the page stays a few hundred KiB.

Node names, metric names and reasons are the nodes' words: every one is HTML-escaped, and the
plots turn matplotlib's mathtext off, so a name such as `$\\frac{1}{0}$` is drawn as typed rather
than parsed (a name mathtext cannot parse would otherwise abort the whole report).
"""

from __future__ import annotations

import io
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from validation.gate import GateResult, MetricStats, NodeVerdict
from validation.reports import visible

if TYPE_CHECKING:
    from matplotlib.axes import Axes

EXTRA = "report"
_RASTER_AT = 2000  # points per plot above which the scatter is embedded as an image
_LABEL_TICKS_UP_TO = 48  # nodes per plot up to which the x axis names every node
_NUMBERED = 40  # rejected nodes numbered per plot; more are counted in the legend
_LANES = 3  # rows of numbers above a plot
_AXES_WIDTH_PT = 490.0  # the plot area's width, about: the figure's 8 in less its margins
_DIGIT_PT = 4.6  # width of one digit at the numbers' 7 pt, plus air between numbers below
_AIR_PT = 4.0
_INPUTS_NAMED_UP_TO = 4  # input files named one by one in the provenance line

OK, BAD, MUTED, MEDIAN, LIMIT, OUTLIER = "#2b6cb0", "#c53030", "#a0aec0", "#2f855a", "#c53030", "#dd6b20"


class MissingPlotLibraryError(RuntimeError):
    """matplotlib is not installed."""


def _fleetforge_version() -> str:
    try:
        return version("fleetforge")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+source"


@dataclass(frozen=True)
class Provenance:
    """What heads the page: which fleetforge made it, when, from what."""

    spec: str | None = None
    generated_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    fleetforge: str = field(default_factory=_fleetforge_version)


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingPlotLibraryError(
            f"--html needs matplotlib, which is not installed; install the `{EXTRA}` extra: "
            f"pip install 'fleetforge[{EXTRA}]'"
        ) from None


def _plot(result: GateResult, stats: MetricStats, numbers: dict[str, int]) -> str:
    from matplotlib import rc_context
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

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
        fig = Figure(figsize=(8.0, 4.0), layout="constrained")
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
            (visible(f"rejected on {metric} (numbered as in Rejected nodes)"), BAD, "X", hit),
        )
        for label, color, marker, mask in groups:
            gx = [x for x, m in zip(xs, mask, strict=True) if m]
            gy = [y for y, m in zip(ys, mask, strict=True) if m]
            if gx:
                size = 14 if raster else (46 if marker == "X" else 30)
                ax.scatter(gx, gy, s=size, c=color, marker=marker, label=label, zorder=3, rasterized=raster)
        _lines(ax, stats)
        keyed = [(x, y, numbers[v.node]) for x, y, (_, v), h in zip(xs, ys, points, hit, strict=True) if h]
        _number_lanes(ax, keyed[:_NUMBERED], len(points))
        if len(keyed) > _NUMBERED:
            ax.plot([], [], " ", label=f"{len(keyed) - _NUMBERED} more not numbered")
        if stats.unit == "count":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            # A flat count (every node 0 errors) autoscales to +-0.05, where no integer lies; and
            # counts are never negative, so the axis starts just below 0 at the lowest.
            low, high = ax.get_ylim()
            bottom = max(math.floor(low), -0.5) if min(ys, default=0) >= 0 else math.floor(low)
            ax.set_ylim(bottom, max(math.ceil(high), bottom + 1.5))
        if len(points) <= _LABEL_TICKS_UP_TO:
            ax.set_xticks(xs, [visible(v.node) for _, v in points], rotation=90, fontsize=7)
        else:
            ax.set_xlabel(f"{len(points)} nodes, ranked worst to best")
        unit = f" ({stats.unit})" if stats.unit else ""
        direction = "higher is better" if stats.higher_is_better else "lower is better"
        # Padded: the number lanes sit between the title and the plot.
        ax.set_title(visible(f"{metric}{unit}: {direction}"), loc="left", fontsize=10, pad=46 if keyed else 6)
        ax.grid(axis="y", color="#e2e8f0", linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        # Below the plot, never over the points it explains, and leaving the plot the full width.
        fig.legend(fontsize=7, loc="outside lower left", frameon=False, ncol=3)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def _number_lanes(ax: Axes, keyed: list[tuple[int, float, int]], n_points: int) -> None:
    """Each rejected point's number (its row in the rejected table) in one of the lanes above the
    plot, joined to the point by a thin line. Greedy: a number goes in the lane where it lands
    nearest its point, never closer than a gap to the number before it in that lane."""
    digits = len(str(max((number for _, _, number in keyed), default=1)))
    gap = max(1.0, n_points * (digits * _DIGIT_PT + _AIR_PT) / _AXES_WIDTH_PT)
    last = [-float("inf")] * _LANES
    for x, y, number in sorted(keyed):
        spots = [max(float(x), last[lane] + gap) for lane in range(_LANES)]
        lane = min(range(_LANES), key=lambda i: (spots[i] - x, i))
        last[lane] = spots[lane]
        ax.annotate(
            str(number),
            xy=(x, y),
            xytext=(spots[lane], 1.02 + 0.06 * lane),
            textcoords=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=7,
            color=BAD,
            annotation_clip=False,
            arrowprops={
                "arrowstyle": "-",
                "color": BAD,
                "linewidth": 0.4,
                "alpha": 0.5,
                "shrinkA": 0,
                "shrinkB": 3,
            },
        )


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
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.provenance{color:#4a5568;font-size:12px;margin:0 0 10px}
.banner{padding:14px 18px;border-radius:6px;font-size:18px;font-weight:600;color:#fff}
.ok{background:#2f855a}.bad{background:#c53030}.warn{background:#b7791f}
.facts{color:#4a5568;margin:8px 0}
table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid #e2e8f0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f7fafc}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th::after{content:" \\2195";color:#a0aec0}
td.node,td.key{white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.reject{color:#c53030;font-weight:600}.accept{color:#2f855a;font-weight:600}
.rule{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#fed7d7;color:#822727;margin-right:4px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(660px,1fr));gap:12px}
.plot{border:1px solid #e2e8f0;border-radius:6px;padding:6px}
.plot svg{width:100%;height:auto}
.note{color:#744210}
dl.columns{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;font-size:12px;color:#4a5568}
dl.columns dt{font-weight:600}dl.columns dd{margin:0}
details{margin-top:8px}summary{cursor:pointer;font-weight:600;padding:4px 0}
code{font-size:12px}
"""

# Click a column heading to sort its table (again to reverse); numbers sort as numbers, blanks last.
_SORT_JS = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], up = th.dataset.dir !== "up";
      var rows = Array.prototype.slice.call(body.rows);
      var key = function (row) { var t = row.cells[col].textContent.trim(), n = Number(t);
        return t === "" ? null : (isNaN(n) ? t.toLowerCase() : n); };
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
        var c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
        return up ? c : -c; });
      rows.forEach(function (row) { body.appendChild(row); });
      th.dataset.dir = up ? "up" : "down";
    });
  });
});
"""

# What every column of the node tables means, shown under them and as each heading's tooltip.
_COLUMNS = (
    ("#", "the rejected node's number, as on the plots"),
    ("node", "the node's name in its results"),
    ("verdict", "accept, or reject for the reasons in the last column"),
    ("role", "with a spec: job (the job lands here) or spare (accepted, kept in reserve)"),
    (
        "pace",
        "the node's worst value over the higher-is-better metrics, as a fraction of the fleet median "
        "(1.000 is the median; 0.950 is 5% slower where it is slowest): what paces a synchronized "
        "step, so the fastest nodes get the job and the slowest become spares; blank below the "
        "fleet-statistics minimum",
    ),
    ("run", "the burn-in run the verdict was judged on"),
    ("reasons", "each reject reason: its rule, then what was measured against what was expected"),
)


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


def _provenance(result: GateResult, prov: Provenance) -> str:
    paths = [r.path for r in result.files]
    if len(paths) <= _INPUTS_NAMED_UP_TO:
        inputs = ", ".join(paths) or "none"
    else:
        try:
            under = os.path.commonpath(paths)
        except ValueError:  # relative and absolute paths mixed
            under = ""
        inputs = f"{len(paths)} files" + (f" under {under}" if under else "")
    when = prov.generated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    facts = [
        f"fleetforge {prov.fleetforge}",
        f"generated {when}",
        f"inputs: {inputs}",
        f"spec: {prov.spec}" if prov.spec else "no spec (every node judged on its own)",
    ]
    return f'<p class="provenance">{_text(" · ".join(facts))}</p>'


def _node_rows(nodes: list[NodeVerdict], numbers: dict[str, int]) -> list[str]:
    rows = []
    for v in nodes:
        pace = f"{v.pace:.3f}" if v.pace is not None else ""
        number = str(numbers[v.node]) if v.node in numbers else ""
        rows.append(
            f'<tr><td class="key num">{number}</td><td class="node">{_text(v.node)}</td>'
            f'<td class="{v.verdict}">{v.verdict}</td><td>{_text(v.role or "")}</td>'
            f'<td class="num">{pace}</td><td><code>{_text(v.run_id or "")}</code></td>'
            f"<td>{_reasons_cell(v)}</td></tr>"
        )
    return rows


def _node_table(rows: list[str]) -> str:
    head = "".join(f'<th title="{escape(meaning)}">{escape(name)}</th>' for name, meaning in _COLUMNS)
    return (
        f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>'
        + "\n".join(rows)
        + "</tbody></table>"
    )


def _every_node(result: GateResult, numbers: dict[str, int]) -> list[str]:
    rejected = [v for v in result.nodes if not v.accepted]
    accepted = [v for v in result.nodes if v.accepted]
    parts = [f"<h2>Every node ({len(result.nodes)})</h2>"]
    if rejected:
        parts.append(f"<p>Rejected first ({len(rejected)}); click a heading to sort.</p>")
        parts.append(_node_table(_node_rows(rejected, numbers)))
    if accepted:
        # Folded: at fleet scale the accepted rows would bury the rejects and the plots.
        opened = " open" if not rejected else ""
        parts.append(f"<details{opened}><summary>{len(accepted)} accepted node(s)</summary>")
        parts.append(_node_table(_node_rows(accepted, numbers)))
        parts.append("</details>")
    parts.append('<dl class="columns">')
    parts += [f"<dt>{escape(name)}</dt><dd>{escape(meaning)}</dd>" for name, meaning in _COLUMNS]
    parts.append("</dl>")
    return parts


def _skipped(result: GateResult) -> list[str]:
    """Checks a node skipped, grouped by check and reason: at 400 nodes one row per cause."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for v in result.nodes:
        for outcome in v.checks.values():
            if outcome.state == "skip":
                groups[(outcome.check, outcome.detail or "no reason given")].append(v.node)
    if not groups:
        return []
    parts = [
        f"<h2>Skipped checks ({len(groups)})</h2>"
        '<table class="sortable"><thead><tr><th>check</th><th>nodes</th><th>reason</th></tr></thead><tbody>'
    ]
    for (check, reason), nodes in sorted(groups.items()):
        shown = ", ".join(nodes[: _INPUTS_NAMED_UP_TO * 2])
        more = (
            f" and {len(nodes) - _INPUTS_NAMED_UP_TO * 2} more"
            if len(nodes) > _INPUTS_NAMED_UP_TO * 2
            else ""
        )
        parts.append(
            f"<tr><td>{_text(check)}</td><td>{len(nodes)}: {_text(shown)}{more}</td><td>{_text(reason)}</td></tr>"
        )
    parts.append("</tbody></table>")
    return parts


def render_html(result: GateResult, provenance: Provenance | None = None) -> str:
    require_matplotlib()
    f = result.fleet
    prov = provenance or Provenance()
    kind, banner = _banner(result)
    rules = result.settings
    rejected = [v for v in result.nodes if not v.accepted]
    numbers = {v.node: i for i, v in enumerate(rejected, 1)}
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>fleetforge gate: {_text(f.sku or 'results')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>fleetforge gate{': ' + _text(f.name) if f.name else ''} ({_text(f.sku or 'unknown SKU')})</h1>",
        _provenance(result, prov),
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
    if rejected:
        parts.append(
            f'<h2>Rejected nodes ({len(rejected)})</h2><table class="sortable"><thead><tr>'
            '<th title="the number that marks the node on the plots">#</th><th>node</th><th>reasons</th>'
            "</tr></thead><tbody>"
        )
        parts += [
            f'<tr><td class="key num">{numbers[v.node]}</td><td class="node">{_text(v.node)}</td>'
            f"<td>{_reasons_cell(v)}</td></tr>"
            for v in rejected
        ]
        parts.append("</tbody></table>")
    parts += _skipped(result)
    # One plot per metric the gate reports on (fleet/metrics.py's, the spec's): a name a node made
    # up is in the notes, counted, never a plot of its own.
    plotted = [s for s in result.reported_stats() if s.n > 0]
    if plotted:
        parts.append(f'<h2>Metrics ({len(plotted)})</h2><div class="plots">')
        parts += [
            f'<div class="plot" id="plot-{_text(s.metric)}">{_plot(result, s, numbers)}</div>'
            for s in plotted
        ]
        parts.append("</div>")
    parts += _every_node(result, numbers)
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
    parts.append(f"<script>{_SORT_JS}</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
