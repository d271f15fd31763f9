"""Line charts of tokens per turn: in the terminal (plotext) and as an SVG file (pygal).

Both libraries are pure Python with no compiled dependencies, so the demo
stays a quick `pip install` on a fresh machine; matplotlib would add numpy
and a font cache for two line charts. pygal writes a standalone SVG that any
browser opens; its tooltip script is left out (`js=[]`) because it would be
fetched from the internet and the demo promises to work offline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

SVG_SUFFIX = ".svg"


def terminal_chart(
    title: str,
    x: Sequence[int],
    series: Mapping[str, Sequence[float]],
    *,
    width: int = 100,
    height: int = 22,
    color: bool = True,
    x_label: str = "turn",
    y_label: str = "tokens",
) -> str:
    """The chart as text (with ANSI colours when `color`), ready to print."""
    import plotext

    figure = plotext.figure  # plotext draws on one module-level figure: clear it around use
    figure.clear()
    for name, values in series.items():
        signal = figure.signal(list(x), list(values), marker="braille")
        signal.label(name)
        signal.lines()
        figure.draw(signal)
    figure.title(title)
    figure.label(x_label, "x")
    figure.label(y_label, "y")
    figure.plot_size(width, height)
    text: str = figure.build().string(colorless=not color)
    figure.clear()
    return text


def save_svg(
    path: str | Path,
    title: str,
    x: Sequence[int],
    series: Mapping[str, Sequence[float]],
    *,
    x_title: str = "turn",
    y_title: str = "tokens",
) -> Path:
    """Write the chart as a standalone SVG and return its path.

    Only SVG is written: PNG would need cairo, a system library a fresh
    machine may not have, and every browser and image viewer opens SVG.
    """
    import pygal
    from pygal.style import Style

    target = Path(path)
    if target.suffix.lower() != SVG_SUFFIX:
        raise ValueError(f"the chart is written as SVG; give a path ending in .svg, not {path}")
    style = Style(
        background="white",
        plot_background="white",
        foreground="#333",
        foreground_strong="#111",
        foreground_subtle="#bbb",
        colors=("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f"),
        font_family="DejaVu Sans, Helvetica, Arial, sans-serif",
        title_font_size=20,
        legend_font_size=14,
        label_font_size=12,
        major_label_font_size=12,
    )
    chart = pygal.Line(
        width=1100,
        height=560,
        title=title,
        x_title=x_title,
        y_title=y_title,
        style=style,
        js=[],
        show_dots=False,
        stroke_style={"width": 2.5},
        legend_at_bottom=True,
        legend_at_bottom_columns=min(4, max(1, len(series))),
        show_minor_x_labels=False,
        x_labels_major_every=max(1, len(x) // 10),
        truncate_legend=-1,
        truncate_label=-1,
    )
    chart.x_labels = [str(v) for v in x]
    for name, values in series.items():
        chart.add(name, [float(v) for v in values])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(chart.render())
    return target
