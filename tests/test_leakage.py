"""The lexical-leakage filter: hand-made examples from the issue, and ROUGE-L against an independent LCS oracle."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkstudy.queries import leakage

#: the paper's filter (ROUGE-L F1 > 0.35 or a shared verbatim 4-gram rejects; Porter stemming), stated here because
#: leakage.check takes its thresholds from the caller (queries reads them from the parameter file)
PAPER = {"rouge_max": 0.35, "ngram": 4, "use_stemmer": True}

# 10 rouge tokens: borman commanded the first crewed flight that orbited the moon
SPAN = "Borman commanded the first crewed flight that orbited the Moon"
# 12 tokens; the LCS with SPAN is (commanded, crewed, the, moon) = 4 -> F1 = 2*4/(12+10) = 0.3636...
JUST_ABOVE = "Who commanded a pioneering crewed mission, one which circled around the Moon?"
# the same plus one word: 13 tokens, LCS still 4 -> F1 = 8/23 = 0.3478...
JUST_BELOW = "Who commanded a pioneering crewed mission, one which circled around the distant Moon?"


def _lcs(a, b):
    """Textbook O(mn) longest-common-subsequence length (the oracle for rouge-score's ROUGE-L)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


@pytest.mark.parametrize("stem", [False, True])
def test_rouge_just_above_threshold_is_rejected(stem):
    assert leakage.rouge_l(JUST_ABOVE, SPAN, stem) == pytest.approx(float(Fraction(8, 22)), abs=1e-12)
    r = leakage.check(JUST_ABOVE, [SPAN], rouge_max=0.35, ngram=4, use_stemmer=stem)
    assert (r["passed"], r["reason"], r["shared_ngrams"]) == (False, "rouge", [])


@pytest.mark.parametrize("stem", [False, True])
def test_rouge_just_below_threshold_passes(stem):
    assert leakage.rouge_l(JUST_BELOW, SPAN, stem) == pytest.approx(float(Fraction(8, 23)), abs=1e-12)
    r = leakage.check(JUST_BELOW, [SPAN], rouge_max=0.35, ngram=4, use_stemmer=stem)
    assert (r["passed"], r["reason"]) == (True, "ok")


def test_threshold_is_strict_greater_than():
    score = leakage.rouge_l(JUST_ABOVE, SPAN)
    assert leakage.check(JUST_ABOVE, [SPAN], **{**PAPER, "rouge_max": score})["passed"]
    assert not leakage.check(JUST_ABOVE, [SPAN], **{**PAPER, "rouge_max": score - 1e-9})["passed"]


def test_one_exact_four_gram_rejects_even_with_low_rouge():
    span = ("The spacecraft was launched on December 21, 1968, and it carried three astronauts around the Moon "
            "ten times before returning to a splashdown in the Pacific Ocean near the recovery ship")
    query = "What happened in the Pacific Ocean afterwards?"  # shares 'in the pacific ocean' only
    r = leakage.check(query, [span], **PAPER)
    assert r["rouge_l"] < 0.35
    assert (r["passed"], r["reason"], r["shared_ngrams"]) == (False, "ngram", ["in the pacific ocean"])


def test_three_gram_alone_does_not_reject():
    r = leakage.check("Where is the Pacific Ocean located relative to Asia?", ["It sank in the Pacific Ocean after a long voyage across many seas."], **PAPER)
    assert r["shared_ngrams"] == [] and r["passed"]


def test_ngram_tokens_ignore_case_and_punctuation():
    assert leakage.shared_ngrams("ON DECEMBER 21, 1968?", "launched on December 21 1968.") == ["on december 21 1968"]
    assert leakage.words("Saint-Étienne's 2nd") == ["saint", "étienne", "s", "2nd"]


def test_near_paraphrase_is_rejected_by_rouge_without_any_four_gram():
    span = "Apollo 8 launched on December 21, 1968, from Kennedy Space Center"
    near = "Apollo 8 was launched in December of 1968 from the Kennedy Center"
    r = leakage.check(near, [span], **PAPER)
    # LCS = apollo 8 launched december 1968 from kennedy center = 8 tokens; F1 = 2*8 / (12 + 11)
    assert r["rouge_l"] == pytest.approx(16 / 23)
    assert _lcs(leakage.words(near), leakage.words(span)) == 8
    assert r["rouge_l"] == pytest.approx(2 * 8 / (len(leakage.words(near)) + len(leakage.words(span))))
    assert (r["passed"], r["reason"], r["shared_ngrams"]) == (False, "rouge", [])


def test_far_paraphrase_passes():
    span = "Apollo 8 launched on December 21, 1968, from Kennedy Space Center"
    r = leakage.check("Which launch site sent the first lunar orbital crew toward the Moon?", [span], **PAPER)
    assert r["passed"] and r["rouge_l"] < 0.1


def test_multi_span_score_is_the_max_and_any_span_can_leak():
    far, leaky = "Completely unrelated words about gardening tools.", SPAN
    r = leakage.check(JUST_ABOVE, [far, leaky], **PAPER)
    assert r["rouge_l_spans"][0] < r["rouge_l_spans"][1] == r["rouge_l"]
    assert not r["passed"]
    r2 = leakage.check("Who commanded the first crewed flight?", [far, leaky], **PAPER)
    assert r2["reason"] == "rouge+ngram" and r2["shared_ngrams"] == ["commanded the first crewed", "the first crewed flight"]


def test_bad_inputs_raise():
    with pytest.raises(TypeError):
        leakage.check("q", "a span passed as a bare string", **PAPER)
    with pytest.raises(ValueError):
        leakage.ngrams(["a"], 0)


WORD = st.sampled_from(["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf"])


@settings(max_examples=150, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=15), st.lists(WORD, min_size=1, max_size=15))
def test_rouge_l_matches_an_independent_lcs(q, ref):
    lcs = _lcs(q, ref)
    expected = 0.0 if lcs == 0 else 2 * lcs / (len(q) + len(ref))
    assert leakage.rouge_l(" ".join(q), " ".join(ref), use_stemmer=False) == pytest.approx(expected, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(st.lists(WORD, min_size=0, max_size=12), st.lists(WORD, min_size=0, max_size=12), st.integers(1, 5))
def test_shared_ngrams_match_brute_force(q, ref, n):
    brute = {" ".join(q[i:i + n]) for i in range(len(q) - n + 1)
             if any(q[i:i + n] == ref[j:j + n] for j in range(len(ref) - n + 1))}
    assert leakage.shared_ngrams(" ".join(q), " ".join(ref), n) == sorted(brute)
    # verbatim containment: a query that copies any n consecutive span words is always caught
    if len(ref) >= n:
        assert not leakage.check("zulu " + " ".join(ref[:n]), [" ".join(ref)], rouge_max=1.0, ngram=n,
                                 use_stemmer=False)["passed"]
