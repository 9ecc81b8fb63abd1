"""Benchmark: how the late-pooling contrasts move with the macro window, on the demo (params/demo_beyond.yaml).

all-MiniLM-L6-v2 embeds a chunk independently at ``max_seq_length`` 256 (it was fine-tuned at 128 tokens) but has
512 position embeddings; late pooling at a window of 512 puts a chunk's tokens at positions the same model never
uses for an independent vector, so a contrast of late against independent embedding mixes "late pooling" with
"positions the model never saw in training". ``embed.late_window`` null now means the embedder's
``max_seq_length`` (docs/beyond.md, "Late pooling"); this bench runs the same demo at windows 128, 256 and 512
(overlap a quarter of the window: ``embed.late_overlap`` null) and prints, per window:

* each late contrast of the user's family (B1-B7) on the primary cell: Δ, the 95% CI, the Holm p within the
  family and the TOST verdict (Holm-adjusted, ±stats.sesoi);
* each late condition's mean cov-nDCG@10, and how far its vectors move from the window-512 ones (1 − cos, mean and
  largest);
* the late conditions' windows encoded and seconds (this machine's: noisy when it is shared).

    .venv/bin/python bench/bench_late_window.py [--windows 128 256 512] [--keep DIR]

It runs stages 01-07 of a scratch project (the real notebooks, the runner) once per window under one corpus name,
so 01-03 and every independently embedded text are computed once; 04 re-pools the late conditions at each window
and 05-07 rerun. About 10 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from chunkstudy import artifacts, config, runner  # noqa: E402

CORPUS = "demo_beyond_window"
STAGES = ("01", "02", "03", "04", "05", "06", "07")


def project(folder: Path) -> Path:
    """A scratch copy of the project (as tests/conftest.py makes one): notebooks and parameter files copied, the
    package and the demo's raw corpus linked."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (folder / "lib").symlink_to(ROOT / "lib", target_is_directory=True)
    (folder / "data").mkdir()
    (folder / "data" / "demo_raw").symlink_to(ROOT / "data" / "demo_raw", target_is_directory=True)
    for sub in ("notebooks", "params", "examples"):
        shutil.copytree(ROOT / sub, folder / sub)
    return folder


def run_window(root: Path, window: int) -> tuple[config.Config, float]:
    """Stages 01-07 of demo_beyond at ``window`` (overlap null: a quarter of it), under one corpus name."""
    params = root / "params" / f"late_w{window}.yaml"
    params.write_text(f"base: demo_beyond.yaml\ncorpus: {{name: {CORPUS}}}\nembed: {{late_window: {window}}}\n")
    t0 = time.perf_counter()
    for stage in STAGES:
        runner.run(params, root, only=stage, log=lambda *_: None)
    return config.load(params, root=root), time.perf_counter() - t0


def late_rows(cfg: config.Config) -> dict[str, np.ndarray]:
    """Each late condition's vectors (strong embedder), in its chunks' chunk_id order."""
    chunks = artifacts.read(cfg, "chunks")
    vec = artifacts.read_vectors(cfg, "strong")
    late = set(artifacts.read(cfg, "late_report")["condition"])
    out = {}
    for cond in sorted(late):
        c = chunks[chunks["condition"] == cond].sort_values("chunk_id")
        out[cond] = vec[c["text_row"].to_numpy()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--keep", type=Path, default=None, help="run in this folder and keep it (default: a temporary "
                                                            "one, removed)")
    a = ap.parse_args()
    import torch

    folder = a.keep or Path(tempfile.mkdtemp(prefix="bench-late-window-"))
    root = project(folder / "project")
    print(f"demo_beyond at late windows {a.windows} (overlap a quarter of each); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    contrasts, means, vectors, reports = {}, {}, {}, {}
    for w in sorted(a.windows, reverse=True):  # the longest first: the others are compared with it
        cfg, seconds = run_window(root, w)
        cell = cfg.params().primary_cell
        user = artifacts.read(cfg, "user_contrasts")
        contrasts[w] = user[user["cell"] == cell.name].set_index("contrast")
        m = artifacts.read(cfg, "condition_means")
        m = m[(m["metric"] == cell.metric) & (m["embedder"] == cell.embedder) & (m["reranker"] == cell.reranker)]
        means[w] = m.set_index("condition")["mean"]
        vectors[w] = late_rows(cfg)
        reports[w] = artifacts.read(cfg, "late_report")
        print(f"window {w}: stages 01-07 in {seconds:.0f} s")
    ref = max(a.windows)
    print(f"\nlate contrasts on the primary cell (Δ [95% CI], Holm p in the user's family, TOST verdict at "
          f"±{contrasts[ref]['sesoi'].iat[0]:g}, Holm-adjusted):")
    print(f"{'contrast':>8} {'A - B':>16} " + " ".join(f"{'window ' + str(w):>44}" for w in sorted(a.windows)))
    for name, r in contrasts[ref].iterrows():
        cells = []
        for w in sorted(a.windows):
            c = contrasts[w].loc[name]
            cells.append(f"{c['mean_delta']:+.4f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] "
                         f"p {c['p_holm']:.3f} {c['equivalence'][:5]:>5}")
        print(f"{name:>8} {r['condition_a'] + ' - ' + r['condition_b']:>16} " + " ".join(f"{x:>44}" for x in cells))
    print(f"\nlate conditions: mean cov-nDCG@10 per window; 1 - cos against window {ref} (mean / max); windows "
          "encoded, seconds")
    rows = []
    for cond in sorted(vectors[ref]):
        row = {"condition": cond}
        for w in sorted(a.windows):
            row[f"mean w{w}"] = round(float(means[w][cond]), 4)
            if w != ref:
                d = 1 - (vectors[w][cond] * vectors[ref][cond]).sum(axis=1)
                row[f"1-cos w{w}"] = f"{d.mean():.3f} / {d.max():.3f}"
            rep = reports[w][reports[w]["condition"] == cond].iloc[0]
            row[f"windows w{w}"] = int(rep["n_windows_run"])
        rows.append(row)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(pd.DataFrame(rows).set_index("condition"))
    seconds = {w: float(reports[w]["seconds"].sum()) for w in a.windows}
    tokens = {w: int(reports[w]["tokens_run"].sum()) for w in a.windows}
    print("\nlate encoding, all late conditions: " + "; ".join(
        f"window {w}: {tokens[w]:,} tokens in {seconds[w]:.1f} s" for w in sorted(a.windows)))
    if a.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
