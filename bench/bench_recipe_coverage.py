"""How often the recipe's 95% interval of a failure reduction covers the true one, and how often its p rejects a
reduction of 0 that is not there, by simulation at the sizes users bring (docs/beyond.md, "Anthropic's recipe").

Each simulated study has G documents of 1-5 queries; a document's baseline failure rate is drawn from a Beta with
mean ``--base`` (its spread set by ``--concentration``: documents differ, as they do), each query fails (1) or not
(0) under the baseline with that rate, and under the step with that rate times ``1 - R`` (paired on the query, each
query drawn on its own), so the population's relative reduction is R. The study's test
(:func:`chunkstudy.stats.recipe.ratio_bootstrap`, B resamples of documents) gives the percentile CI and p of R.
Printed per G: the coverage of the true R by the 95% CI (and of 0 under R = 0, one minus the test's size), the
share of studies with p < 0.05, each with its Monte Carlo SE.

    .venv/bin/python bench/bench_recipe_coverage.py                     # G = 10, 20, 50, 100, 400; R = 0.35 and 0
    .venv/bin/python bench/bench_recipe_coverage.py --studies 200 --sizes 20 100
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from chunkstudy import significance
from chunkstudy.stats import recipe


def study(rng: np.random.Generator, g: int, base: float, concentration: float, reduction: float):
    sizes = rng.integers(1, 6, size=g)
    rate = rng.beta(base * concentration, (1 - base) * concentration, size=g)
    docs = np.repeat(np.arange(g), sizes)
    p = rate[docs]
    return ((rng.random(len(docs)) < p * (1 - reduction)).astype(float),
            (rng.random(len(docs)) < p).astype(float), docs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 50, 100, 400])
    ap.add_argument("--reductions", type=float, nargs="+", default=[0.35, 0.0])
    ap.add_argument("--studies", type=int, default=400)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--base", type=float, default=0.3)
    ap.add_argument("--concentration", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    print(f"{a.studies} studies per line, B = {a.n_boot}, baseline failure {a.base} (Beta concentration "
          f"{a.concentration}), 1-5 queries per document")
    print("R     G    covered (MC SE)   p < 0.05 (MC SE)   undefined draws")
    for reduction in a.reductions:
        for g in a.sizes:
            rng = np.random.default_rng([a.seed, g, int(reduction * 1000)])
            covered = rejected = undefined = 0
            done = 0
            for s in range(a.studies):
                step, base, docs = study(rng, g, a.base, a.concentration, reduction)
                test = significance.BootstrapTest(a.n_boot, s, 0.05, 2)
                got = recipe.ratio_bootstrap(step, base, docs, test)
                if math.isnan(got.ci_low):
                    continue
                done += 1
                covered += got.ci_low <= reduction <= got.ci_high
                rejected += got.p < 0.05
                undefined += got.undefined
            c, r = covered / done, rejected / done
            print(f"{reduction:<5} {g:<4} {c:.3f} ({math.sqrt(c * (1 - c) / done):.3f})     {r:.3f} "
                  f"({math.sqrt(r * (1 - r) / done):.3f})      {undefined / max(done, 1) / a.n_boot:.4f}"
                  + (f"   ({a.studies - done} studies without an interval)" if done < a.studies else ""))


if __name__ == "__main__":
    main()
