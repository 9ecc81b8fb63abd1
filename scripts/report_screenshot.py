"""The README's picture of a report: ``figures/<corpus>/report.html`` rendered by headless Chromium, cropped to its
top (title, warnings, the models used, the headline contrasts and their figure) and saved as a palette PNG.

    ./run_all.sh demo
    .venv/bin/python scripts/report_screenshot.py                       # figures/demo/report.html -> docs/img/report-demo.png
    .venv/bin/python scripts/report_screenshot.py REPORT.html OUT.png --height 1400

Chromium is Debian's (``apt-get install -y chromium``, or ``$CHUNKSTUDY_CHROMIUM``), driven by the ``playwright``
package of the dev extra, as the browser tests drive it (never ``playwright install``).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", nargs="?", default=str(ROOT / "figures/demo/report.html"))
    ap.add_argument("out", nargs="?", default=str(ROOT / "docs/img/report-demo.png"))
    ap.add_argument("--width", type=int, default=1100, help="viewport width in CSS pixels")
    ap.add_argument("--height", type=int, default=2600, help="how much of the page's top to keep (CSS pixels)")
    ap.add_argument("--scale", type=float, default=1.0, help="the PNG's size relative to the page's CSS pixels")
    ap.add_argument("--colors", type=int, default=64, help="palette size of the PNG (smaller file)")
    args = ap.parse_args(argv)
    report = Path(args.report).resolve()
    if not report.is_file():
        print(f"report_screenshot: {report} does not exist (run ./run_all.sh demo first)", file=sys.stderr)
        return 2
    exe = os.environ.get("CHUNKSTUDY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).is_file():
        print("report_screenshot: no Chromium (apt-get install -y chromium, or set CHUNKSTUDY_CHROMIUM)",
              file=sys.stderr)
        return 2
    from PIL import Image
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        png = page.screenshot(clip={"x": 0, "y": 0, "width": args.width, "height": args.height})
        browser.close()
    img = Image.open(io.BytesIO(png)).convert("RGB")
    if args.scale != 1:
        img = img.resize((round(img.width * args.scale), round(img.height * args.scale)), Image.Resampling.LANCZOS)
    img = img.quantize(colors=args.colors, method=Image.Quantize.MEDIANCUT)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    img.save(tmp, format="PNG", optimize=True)
    tmp.replace(out)
    print(f"report_screenshot: wrote {out} ({out.stat().st_size // 1024} KiB, {img.width}x{img.height})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
