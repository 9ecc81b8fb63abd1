"""Benchmark: coverage of the secondary models' 95% CIs in simulated studies with known variances
(chunkstudy.stats.simulate.mixed_coverage; docs/design.md, "Statistics").

Scores ``base + u_d + v_q + effect_c + w_{d,c} + e_{q,c}`` (document, query, document x condition and noise SDs
known): the correctly specified model (paired differences, a random intercept per document,
:func:`chunkstudy.stats.fit_paired_mixedlm`) against the pre-registered one (``score ~ condition + (1 |
document)``, statsmodels, :func:`chunkstudy.stats.fit_mixedlm`), which leaves the query's variance in its
residual. Prints each model's coverage and mean SE against the SD of the estimates, and the paired model's
variance estimates against the truth; then how long each model takes at QASPER's size (416 documents, 1,298
queries), with statsmodels' fit of the scores' own model (a random intercept and condition slope per document and
a query intercept nested in it) and, with ``--crossed``, the crossed form with one group (minutes).

    .venv/bin/python bench/bench_mixed_coverage.py [--sims 1000] [--prereg-sims 200] [--crossed]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from chunkstudy import stats  # noqa: E402
from chunkstudy.stats import simulate  # noqa: E402


def qasper_sized(crossed: bool) -> None:
    """Seconds per fit of each model on one simulated study of QASPER's size."""
    import statsmodels.formula.api as smf

    n_docs, n_queries = 416, 1298
    scores, queries = stats.simulate_scores(n_docs, n_queries, {"A": 0.02, "B": 0.0}, seed=1, doc_condition_sd=0.05)
    values = scores["value"].to_numpy().reshape(n_queries, 2)
    docs, qids = queries["doc_id"].to_numpy(), queries["query_id"].to_numpy()
    long = pd.DataFrame({"value": values.T.ravel(), "treated": np.repeat([1.0, 0.0], n_queries),
                         "doc": np.r_[docs, docs], "query": np.r_[qids, qids], "one": 1})
    fits = {"paired (closed-form REML)": lambda: stats.fit_paired_mixedlm(values[:, 0] - values[:, 1], docs,
                                                                          alpha=0.05),
            "pre-registered (statsmodels)": lambda: stats.fit_mixedlm(long["value"], long["treated"], long["doc"],
                                                                     alpha=0.05),
            "scores' model, nested (statsmodels)": lambda: smf.mixedlm(
                "value ~ treated", long, groups=long["doc"], re_formula="~treated",
                vc_formula={"query": "0 + C(query)"}).fit(reml=True)}
    if crossed:
        fits["scores' model, crossed, one group (statsmodels)"] = lambda: smf.mixedlm(
            "value ~ treated", long, groups=long["one"], re_formula="0",
            vc_formula={"doc": "0 + C(doc)", "query": "0 + C(query)", "slope": "0 + C(doc):treated"}).fit(reml=True)
    print(f"\nQASPER's size: {n_docs} documents, {n_queries} queries (one contrast)")
    for name, fit in fits.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fit()
        coef, se = (r["coef"], r["se"]) if isinstance(r, dict) else (r.fe_params["treated"], r.bse_fe["treated"])
        print(f"  {name:<48} {time.perf_counter() - t0:8.2f} s   coef {coef:.5f}  se {se:.5f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--prereg-sims", type=int, default=200)
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--queries", type=int, default=240)
    ap.add_argument("--crossed", action="store_true")
    a = ap.parse_args()
    kw = dict(n_docs=a.docs, n_queries=a.queries, effect=0.03, alpha=0.05, doc_sd=0.1, query_sd=0.2, doc_condition_sd=0.03,
              noise_sd=0.1)
    print(f"studies of {a.docs} documents, {a.queries} queries; contrast 0.03; SDs: document 0.1, query 0.2, "
          "document x condition 0.03, noise 0.1")
    t0 = time.perf_counter()
    p = simulate.mixed_coverage(a.sims, seed=43, **kw)
    print(f"paired model, {a.sims} studies ({time.perf_counter() - t0:.0f} s): 95% CI coverage {p['paired']:.3f} "
          f"(MC SE {p['mc_se']:.4f}); mean SE {p['paired_se']:.5f} vs SD of the estimates {p['sd_estimate']:.5f}; "
          f"document variance {p['doc_var']:.5f} (true {p['true_doc_var']:.5f}), residual {p['resid_var']:.5f} "
          f"(true {p['true_resid_var']:.5f})")
    t0 = time.perf_counter()
    b = simulate.mixed_coverage(a.prereg_sims, seed=44, preregistered=True, **kw)
    print(f"both models, {a.prereg_sims} studies ({time.perf_counter() - t0:.0f} s): coverage paired "
          f"{b['paired']:.3f}, pre-registered {b['preregistered']:.3f} (MC SE at 0.95: {b['mc_se']:.4f}); mean SE "
          f"paired {b['paired_se']:.5f}, pre-registered {b['preregistered_se']:.5f} "
          f"({b['preregistered_se'] / b['paired_se']:.2f}x)")
    qasper_sized(a.crossed)


if __name__ == "__main__":
    main()
