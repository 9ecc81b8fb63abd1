"""Benchmark: the family-wise rate of false equivalence verdicts at the bound, with and without Holm within the
family (chunkstudy.stats.equivalence; docs/beyond.md, "Equivalence").

TOST keeps the error of one equivalence claim at alpha; a family of m contrasts, each exactly at the bound
(|δ| = sesoi, where both "equivalent" and "not equivalent" are false), gets at least one false "equivalent" in up to
``1 − (1 − alpha)^m`` of studies when each contrast is decided alone. 07 decides the family on Holm-adjusted
p-values (:class:`chunkstudy.stats.verdict.tost.TostVerdict`). This prints both rates for families of 1, 4 (the
confirmatory family), 6 and 10 contrasts, simulated by :func:`chunkstudy.stats.simulate.tost_family_rates`
(independent contrasts clustered by document, each study with a bootstrap seed of its own).

    .venv/bin/python bench/bench_tost_family.py [--sims 1000] [--docs 100] [--queries-per-doc 3] [--boot 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from chunkstudy.significance import BootstrapTest  # noqa: E402
from chunkstudy.stats import simulate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--queries-per-doc", type=int, default=3)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--families", type=int, nargs="+", default=[1, 4, 6, 10])
    ap.add_argument("--sesoi", type=float, default=0.02)
    a = ap.parse_args()
    test = BootstrapTest(a.boot, 0, 0.05, 2)
    print(f"{a.sims} studies per family; {a.docs} documents x {a.queries_per_doc} queries; {a.boot} resamples; "
          f"every contrast at |delta| = sesoi = {a.sesoi}; alpha {test.alpha}")
    print(f"{'m':>3} {'1-(1-a)^m':>10} {'equivalent: alone':>18} {'Holm':>7} {'not equiv.: alone':>18} {'Holm':>7} "
          f"{'MC SE at a':>10} {'seconds':>8}")
    for m in a.families:
        t0 = time.perf_counter()
        r = simulate.tost_family_rates(test, a.sesoi, m, n_docs=a.docs, queries_per_doc=a.queries_per_doc,
                                       n_sims=a.sims, seed=43 + m)
        print(f"{m:>3} {1 - (1 - test.alpha) ** m:>10.3f} {r['raw_equivalent']:>18.3f} {r['holm_equivalent']:>7.3f} "
              f"{r['raw_not_equivalent']:>18.3f} {r['holm_not_equivalent']:>7.3f} {r['mc_se']:>10.4f} "
              f"{time.perf_counter() - t0:>8.1f}")


if __name__ == "__main__":
    main()
