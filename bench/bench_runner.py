"""Runner overhead: executing a trivial notebook in-process (what run_all.sh does) vs the papermill CLI.

Prints the seconds per notebook for both and their ratio, plus the time of a fully skipped pipeline check.
Usage: .venv/bin/python bench/bench_runner.py [--repeats 3]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chunkstudy import runner

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "runner" / "notebooks"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        shutil.copytree(FIXTURE, root / "notebooks")
        (root / "params").mkdir()
        params = root / "params" / "tiny.yaml"
        params.write_text("corpus: {name: tiny}\n")
        quiet = lambda *_: None  # noqa: E731
        runner.run(params, root, log=quiet)  # warm-up (imports, kernel spec lookup)

        t0 = time.perf_counter()
        for _ in range(args.repeats):
            runner.run(params, root, force=True, log=quiet)
        inproc = (time.perf_counter() - t0) / (2 * args.repeats)

        t0 = time.perf_counter()
        statuses = runner.run(params, root, log=quiet)
        skipped = time.perf_counter() - t0
        if any(status != "skipped" for _, status, _ in statuses):
            print(f"note: the skip check reran stages (was lib/chunkstudy edited meanwhile?): {statuses}")

        import jupytext

        nb = jupytext.read(root / "notebooks" / "01_corpus.py")
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        jupytext.write(nb, root / "in.ipynb", fmt="ipynb")
        papermill = str(Path(sys.executable).with_name("papermill"))
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            subprocess.run([papermill, str(root / "in.ipynb"), str(root / "out.ipynb"), "-p", "params_file",
                            str(params), "--cwd", str(root), "-k", "python3"], check=True, capture_output=True,
                           env={**os.environ, "CHUNKSTUDY_ROOT": str(root / "cli")})
        cli = (time.perf_counter() - t0) / args.repeats


    print(f"in-process papermill per notebook: {inproc:.2f} s")
    print(f"papermill CLI per notebook:        {cli:.2f} s")
    print(f"ratio CLI / in-process:            {cli / inproc:.2f}x")
    print(f"skip check, 2 unchanged stages:    {skipped:.3f} s")


if __name__ == "__main__":
    main()
