"""An SVG figure as PNG and PDF, drawn by Debian's Chromium: what the kernel lesson's figures
need, since they are drawn as SVG (``paged.viz.render.kernel.figure_svg``), not by plotly.

The PNG is the SVG rasterised at ``PNG_SCALE`` (2560 x 1440 px from 1280 x 720), like every
other lecture figure's; the PDF is Chromium's print of the SVG, so its cells, strokes and text
stay vector and text (a screenshot of the player would be one bitmap). Each SVG is opened as a
document of its own from a temporary file; every other URL is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The figure's size in CSS px and the PNG's scale, as the plotly figures are exported.
SIZE = (1280, 720)
PNG_SCALE = 2.0
FORMATS = ("png", "pdf")


def printed(svgs: Iterable[str], fmts: Iterable[str]) -> list[dict[str, bytes]]:
    """Each SVG (``SIZE`` px) in each of ``fmts`` (png, pdf), with one Chromium for them all.
    Runs Playwright in a thread of its own: its sync API refuses a thread whose asyncio loop
    is already running (the app's, or kaleido's). Raises ValueError for another format."""
    from concurrent.futures import ThreadPoolExecutor

    svgs, fmts = list(svgs), list(dict.fromkeys(fmts))
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        raise ValueError(f"an SVG is printed as png or pdf, not {bad[0]!r}")
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(_print, svgs, fmts).result()


def _print(svgs: list[str], fmts: list[str]) -> list[dict[str, bytes]]:
    import tempfile
    from pathlib import Path

    from playwright.sync_api import sync_playwright

    from paged.viz.export.serve import launch_chromium

    w, h = SIZE
    out: list[dict[str, bytes]] = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            ctx = browser.new_context(
                viewport={"width": w, "height": h}, device_scale_factor=PNG_SCALE
            )
            # the SVG is opened as a document of its own: no page margin, nothing to fetch
            ctx.route(
                "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
            )
            page = ctx.new_page()
            for n, svg in enumerate(svgs):
                path = Path(tmp) / f"figure{n}.svg"
                path.write_text(svg, encoding="utf-8")
                page.goto(path.as_uri())
                drawn: dict[str, bytes] = {}
                if "png" in fmts:
                    drawn["png"] = page.screenshot(type="png")
                if "pdf" in fmts:
                    drawn["pdf"] = page.pdf(
                        width=f"{w}px",
                        height=f"{h}px",
                        margin={"top": "0", "right": "0", "bottom": "0", "left": "0"},
                        print_background=True,
                        page_ranges="1",
                    )
                out.append(drawn)
        finally:
            browser.close()
    return out
