"""The cross-field checks of a parameter file (:data:`RULES`), run by :func:`chunkstudy.config.load` after every key
passed its own check.

A rule returns None when the parameters pass, else what is wrong; :func:`chunkstudy.config.check_rules` raises
the error naming the file and the rule's dotted key. Rules read the validated parameters as plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from . import design
from .paramspec import is_name
from .significance import SMALLEST_P_RULE, BootstrapTest


@dataclass(frozen=True)
class Rule:
    """A check across parameters: ``test(data)`` returns None when the parameters pass, else what is wrong; the
    error names ``key`` (dotted) and the file. ``own_row``: docs/parameters.md says the rule in the key's own row
    (what it accepts) rather than in the cross-field table, as for a bound every key of a kind takes (a metric's
    rank cut-off, :func:`rank_cut_rules`)."""

    key: str
    test: Callable[[dict], str | None]
    doc: str = ""
    own_row: bool = False


def dotted_value(data: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``"stats.alpha"``) of nested mappings."""
    for part in dotted.split("."):
        data = data[part]
    return data


def less_than(a: str, b: str) -> Rule:
    return Rule(a, lambda d: None if dotted_value(d, a) < dotted_value(d, b) else
                f"{dotted_value(d, a)!r} must be less than {b} ({dotted_value(d, b)!r})", f"{a} < {b}")


def at_most(a: str, b: str) -> Rule:
    return Rule(a, lambda d: None if dotted_value(d, a) <= dotted_value(d, b) else
                f"{dotted_value(d, a)!r} must not exceed {b} ({dotted_value(d, b)!r})", f"{a} <= {b}")


def rank_cut_rules(metrics: Sequence[design.Metric] = design.METRICS) -> tuple[Rule, ...]:
    """``metrics.<parameter> <= retrieve.k`` for each parameter that is a metric's rank cut-off
    (:attr:`chunkstudy.design.Metric.rank_cut`: ``cutoff``, ``recall_k``), once each in declared order: a run list
    holds at most ``retrieve.k`` ranks, so a deeper cut-off would count ranks no list has."""
    keys = dict.fromkeys(f"metrics.{m.parameter}" for m in metrics if m.rank_cut)
    return tuple(replace(at_most(key, "retrieve.k"), doc="at most `retrieve.k` (a rank cut-off)", own_row=True)
                 for key in keys)


def one_of(key: str, what: str, names: Callable[[dict], list], unless_empty: bool = False) -> Rule:
    """``key`` must be one of ``names(data)`` (``what`` says where they come from); with ``unless_empty``, a file
    that declares none of them (e.g. no embedders: it only runs the corpus stages) is not checked."""
    def test(d: dict) -> str | None:
        valid = list(names(d))
        if unless_empty and not valid:
            return None
        return None if dotted_value(d, key) in valid else f"{dotted_value(d, key)!r} is not one of {what}: {valid}"
    return Rule(key, test, f"{key} is one of {what}")


def _embedders(d: dict) -> list[str]:
    return list(d["embed"]["embedders"])


def _retrievers(d: dict) -> list[str]:
    """The run's retrievers (:func:`chunkstudy.design.retrievers`): its cells' second coordinate."""
    return list(design.retrievers(d["retrieve"]["modes"], _embedders(d)))


def _modes(d: dict) -> str | None:
    """``retrieve.modes`` holds the dense mode (the primary cell's), and no embedder key is another mode's retriever
    name (``bm25``, ``hybrid-<key>``): a cell must name one retriever."""
    if design.DENSE not in d["retrieve"]["modes"]:
        return f"{list(d['retrieve']['modes'])} lacks {design.DENSE!r}: the primary cell (stats.primary_metric x " \
               "embed.strong) is dense; add it"
    others = [m for m in design.RETRIEVAL_MODES.values() if m.name != design.DENSE]
    for key in _embedders(d):
        for m in others:
            if key in {m.retriever_name(e) for e in _embedders(d)}:
                return f"embed.embedders.{key}: the name is the {m.name} mode's retriever; rename the embedder"
    return None


def _fusion(d: dict) -> str | None:
    """``retrieve.fusion``: a weight above 0, and a depth that lets the fused list fill ``retrieve.k``."""
    f, k = d["retrieve"]["fusion"], d["retrieve"]["k"]
    if not f["dense_weight"] + f["bm25_weight"] > 0:
        return "dense_weight and bm25_weight are both 0: nothing is fused; give one a weight above 0"
    if f["depth"] is not None and f["depth"] < k:
        return f"depth {f['depth']} is below retrieve.k ({k}): the fused list could not fill k ranks"
    return None


def _metric_names(d: dict) -> list[str]:
    return design.metric_names(d["metrics"])  # the canonical names, as 06 writes them


def _twice(seen: dict, name: str, pair: Any, family: str) -> str | None:
    """An error when ``pair`` (or its reverse) is already a contrast of ``seen`` (``(a, b)`` -> name, filled here):
    the same comparison under two names would be counted twice (twice in a Holm family)."""
    key = tuple(sorted(pair))
    if key in seen:
        other, first = seen[key]
        how = "the same pair" if list(first) == list(pair) else "the same pair reversed"
        return (f"{name}: {list(pair)} is {how} as {other} {list(first)}; a contrast counted twice would enter "
                f"the {family} twice. Keep one of {other} and {name}")
    seen[key] = (name, pair)
    return None


def _contrasts(d: dict) -> str | None:
    conds = d["chunking"]["conditions"]
    seen: dict = {}
    for name, pair in d["stats"]["contrasts"].items():
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1]):
            return f"{name}: expected [condition A, condition B] of two different conditions, got {pair!r}"
        missing = [c for c in pair if c not in conds]
        if missing:
            return f"{name}: {missing[0]!r} is not among chunking.conditions {conds}"
        if (twice := _twice(seen, name, pair, "Holm family of stats.contrasts")) is not None:
            return twice
    return None


def _power_can_reject(d: dict) -> str | None:
    """The power simulation runs the study's test (:class:`chunkstudy.significance.BootstrapTest`) with
    ``stats.power_n_boot`` resamples: its smallest p is 2/(B + 1), so with too few resamples no simulated study
    of the family can reject and every power would read 0."""
    st = d["stats"]
    m = max(1, len(st["contrasts"]))
    test = BootstrapTest.of(st, n_boot=st["power_n_boot"])
    if test.can_reject(m):
        return None
    return (f"{test.n_boot} resamples cannot reject anything: the smallest Holm-adjusted p over {m} contrasts is "
            f"{m}·{SMALLEST_P_RULE} = {test.smallest_holm_p(m):.3g} at B = {test.n_boot}, not below stats.alpha "
            f"{test.alpha:g}; use at least {test.resamples_to_reject(m)}")


def _extra_conditions(d: dict) -> str | None:
    """User conditions: a chunker is named exactly when the boundaries are a chunker's; no name (or twin name)
    clashes with a paper condition or another user condition; a depth only where a heading path is cut; a context
    only on a chunk set 02 cuts; a twin only of a chunker's cut; no overlapping chunks under late pooling; the
    semantic chunker's embedder is declared."""
    taken = {c: "a paper condition" for c in design.CONDITION_NAMES}
    for name, spec in d["conditions"]["extra"].items():
        boundaries = spec["boundaries"]
        kind = design.PREFIX_KINDS[spec["prefix"]]
        if spec.get("of") is not None:
            if spec["chunker"] or spec["size_matched_twin"] or boundaries != "chunker":
                return f"{name}: 'of: {spec['of']}' takes that condition's chunks whole; state no chunker, no " \
                       "boundaries and no size_matched_twin"
            if spec["prefix"] != design.NO_PREFIX or spec["depth"] is not None:
                return f"{name}: 'of: {spec['of']}' takes that condition's prefix whole; state no prefix and no depth"
            if spec["of"] not in d["chunking"]["conditions"]:
                return f"{name}.of: {spec['of']!r} is not in chunking.conditions {list(d['chunking']['conditions'])}"
        elif boundaries == "chunker" and not spec["chunker"]:
            return f"{name}.chunker is empty; name a chunker (e.g. 'semchunk', 'chonkie:SemanticChunker', " \
                   "'mypackage.mymodule:chunk'), take a paper chunk set (boundaries: fixed, induced or gold), or " \
                   "take a condition whole with 'of'"
        if boundaries != "chunker" and spec["chunker"]:
            return f"{name}.chunker: boundaries {boundaries!r} take the paper's chunk set " \
                   f"{design.PAPER_CUTS[boundaries]}; leave chunker out, or set boundaries: chunker"
        if spec["depth"] is not None and not kind.heading_path:
            return f"{name}.depth: a {spec['prefix']!r} prefix has no heading path to cut; leave depth out"
        if kind.contexts and boundaries == "chunker" and spec.get("of") is None:
            return f"{name}.prefix: a {spec['prefix']!r} prefix reads the situating contexts 02 writes, and 02 cuts " \
                   "only the paper's chunk sets (boundaries fixed, induced or gold), not a chunker's"
        if spec["overlap"] and spec["embedding"] == design.LATE:
            return f"{name}: overlap: true with embedding: late; late pooling pools each token into one chunk of " \
                   "one sequence per document, so the chunks must not overlap: set overlap: false (and a chunker " \
                   "that does not overlap), or embedding: independent"
        if spec.get("placebo_seed") is not None and (not kind.control or spec.get("of") is not None):
            controls = " or ".join(k.name for k in design.PREFIX_KINDS.values() if k.control)
            return f"{name}.placebo_seed: only a {controls} prefix of the entry's own (prefix: {controls}, no " \
                   "'of') is permuted; leave placebo_seed out"
        if spec["size_matched_twin"] and boundaries != "chunker":
            return f"{name}.size_matched_twin: only a chunker's cut gets a twin (the paper's A0 is already the " \
                   "size-matched twin of A2)"
        embedders = list(d["embed"]["embedders"])
        if spec["embedder"] is not None and embedders and spec["embedder"] not in embedders:
            return f"{name}.embedder: {spec['embedder']!r} is not one of the keys of embed.embedders: {embedders}"
        for n in design.extra_condition_names({name: spec}):
            if n in taken:
                return f"{name}: the name {n!r} is already {taken[n]}; choose another"
            taken[n] = f"a condition of conditions.extra ({name})"
    return None


def _sesoi_bounds(d: dict) -> str | None:
    """``stats.sesoi_by_metric``: each key a metric of the metrics section other than ``stats.primary_metric``
    (whose bound is ``stats.sesoi``), each bound a positive number in that metric's units."""
    names, primary = _metric_names(d), d["stats"]["primary_metric"]
    for metric, bound in d["stats"]["sesoi_by_metric"].items():
        if metric == primary:
            return f"{metric}: the primary metric's bound is stats.sesoi; state it there"
        if metric not in names:
            return f"{metric!r} is not a metric of this run; metrics: {names}"
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0:
            return f"{metric}: expected a positive number in the metric's units, got {bound!r}"
    return None


def _extra_contrasts(d: dict) -> str | None:
    """User contrasts: ``NAME: [A, B]`` of two different conditions that the run builds (chunking.conditions and
    conditions.extra with twins), named apart from stats.contrasts."""
    conds = list(d["chunking"]["conditions"]) + design.extra_condition_names(d["conditions"]["extra"])
    seen: dict = {}
    for name, pair in d["contrasts"]["extra"].items():
        if not is_name(str(name)):
            return f"{name!r} is not a plain name (a letter or digit, then letters, digits, '.', '_' or '-')"
        if name in d["stats"]["contrasts"]:
            return f"{name}: the name is a contrast of stats.contrasts (the confirmatory family); choose another"
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(c, str) for c in pair)
                and pair[0] != pair[1]):
            return f"{name}: expected [condition A, condition B] of two different conditions, got {pair!r}"
        missing = [c for c in pair if c not in conds]
        if missing:
            return f"{name}: {missing[0]!r} is not a condition of this run; conditions: {conds}"
        if (twice := _twice(seen, name, pair, "user contrasts' Holm family")) is not None:
            return twice
    return None


def _primary_k(d: dict) -> tuple[int, str]:
    """The primary specification's point of the k axis and the key that sets it: the primary metric's cut-off when
    its family is on the axis (:attr:`chunkstudy.design.Metric.k_axis`), else the first such family's
    (``metrics.cutoff``, cov-nDCG's)."""
    found = design.metric_of(d["stats"]["primary_metric"])
    fam = found[0] if found is not None and found[0].k_axis else next(m for m in design.METRICS if m.k_axis)
    return d["metrics"][fam.parameter], f"metrics.{fam.parameter}"


def _multiverse_axis(key: str) -> Callable[[dict], str | None]:
    """The specification curve's axis ``multiverse.<key>``: each alternative is one the run computes, and a stated
    axis holds the primary specification's value, so the primary specification is a point of the grid."""
    def test(d: dict) -> str | None:
        mv, st = d["multiverse"], d["stats"]
        valid, primary, source = {
            "metrics": (_metric_names(d), st["primary_metric"], "stats.primary_metric"),
            "cutoffs": (None, *_primary_k(d)),
            "embedders": (_retrievers(d), d["embed"]["strong"], "embed.strong"),
            "rerankers": (["none", *d["retrieve"]["rerankers"]], st["primary_reranker"], "stats.primary_reranker"),
            "query_types": (None, "all", "every query"),
            "bootstrap_seeds": (None, st["seed"], "stats.seed")}[key]
        values = mv[key]
        bad = [v for v in values if valid is not None and v not in valid]
        if bad:
            return f"{bad[0]!r} is not one of the run's {valid}"
        if values and primary not in values:
            return f"{values} lacks the primary specification's {primary!r} ({source}); add it"
        over = [k for k in values if key == "cutoffs" and k > d["retrieve"]["k"]]
        return f"{over[0]} exceeds retrieve.k ({d['retrieve']['k']}): no list is that long" if over else None
    return test


#: special tokens a BERT-style tokenizer wraps one sequence in (``[CLS] ... [SEP]``, RoBERTa's ``<s> ... </s>``): what
#: a late-pooling macro window holds besides content tokens, for the rule on ``embed.late_overlap`` (04 checks the
#: tokenizer's own count, :class:`chunkstudy.chunks.late.LateEncoder`)
LATE_SPECIAL_TOKENS = 2


def _late_names(d: dict) -> list[str]:
    """The conditions of ``conditions.extra`` embedded by late pooling."""
    return [name for name, spec in d["conditions"]["extra"].items() if spec["embedding"] == design.LATE]


def _late_embedders(d: dict) -> str | None:
    """Late pooling pools every embedder's token states, which only a sentence-transformers model run in torch
    gives: a late condition beside a served (or flag, or ONNX) embedder is refused, naming both."""
    late = _late_names(d)
    for key, spec in d["embed"]["embedders"].items() if late else ():
        if spec["backend"] != "sentence-transformers" or spec["runtime"] != "torch":
            how = ("served (backend: openai): a server sends pooled vectors, not token states"
                   if spec["backend"] == "openai" else f"backend {spec['backend']!r}, runtime {spec['runtime']!r}")
            return (f"{late[0]}: embedding: late pools the token states of every embedder of embed.embedders in "
                    f"torch, and embed.embedders.{key} is {how}; give {late[0]} embedding: independent, or embed "
                    f"with sentence-transformers models in torch")
    return None


def _late_windows(d: dict) -> list[tuple[str, int, int | None]]:
    """``(embedder, window, encoder positions)`` of every sentence-transformers embedder under late pooling: the
    window ``embed.late_window``, or when null the embedder's ``max_seq_length`` (the model's own where the file
    states none) capped at its positions, as 04 takes it (:func:`chunkstudy.chunks.late.default_window`). Positions
    and lengths are read from the model's folder (None where it cannot be found here: 04 names the model)."""
    from . import models

    e, out = d["embed"], []
    for key, spec in e["embedders"].items():
        if spec["backend"] != "sentence-transformers":
            continue
        positions = models.encoder_positions(spec["model"])
        length = spec["max_seq_length"] or models.own_max_seq_length(spec["model"])[0] or models.ASSUMED_SEQ_LENGTH
        window = e["late_window"] if e["late_window"] is not None else min(length, positions or length)
        out.append((key, int(window), positions))
    return out


def _late_window(d: dict) -> str | None:
    """``embed.late_window`` within every late-pooled encoder's positions (:func:`_late_windows`)."""
    if not _late_names(d) or d["embed"]["late_window"] is None:
        return None
    for key, window, positions in _late_windows(d):
        if positions is not None and window > positions:
            return (f"{window} exceeds the {positions} positions of the encoder of embed.embedders.{key} "
                    f"({d['embed']['embedders'][key]['model']}); at most {positions}, or null (the embedder's "
                    "max_seq_length)")
    return None


def _late_overlap(d: dict) -> str | None:
    """``embed.late_overlap`` below a macro window's content tokens: the window less :data:`LATE_SPECIAL_TOKENS`
    (``embed.late_window`` when stated; with late conditions, each late-pooled embedder's window)."""
    e = d["embed"]
    overlap = e["late_overlap"]
    if overlap is None:
        return None
    windows = [("embed.late_window", e["late_window"])] if e["late_window"] is not None else []
    if _late_names(d) and not windows:
        windows = [(f"the window of embed.embedders.{key} (its max_seq_length)", w) for key, w, _ in _late_windows(d)]
    for what, window in windows:
        if overlap >= window - LATE_SPECIAL_TOKENS:
            return (f"{overlap} must be below the content tokens of a macro window: {what}, {window}, less the "
                    f"{LATE_SPECIAL_TOKENS} special tokens of a BERT-style tokenizer, is {window - LATE_SPECIAL_TOKENS}"
                    "; null takes a quarter of the window")
    return None


def _multiverse_conditions(d: dict) -> str | None:
    """``multiverse.conditions``: each stands in for a condition of the run, listed first, by others of the run."""
    conds = list(d["chunking"]["conditions"]) + design.extra_condition_names(d["conditions"]["extra"])
    for cond, alternatives in d["multiverse"]["conditions"].items():
        unknown = [c for c in [cond, *alternatives] if c not in conds]
        if unknown:
            return f"{cond}: {unknown[0]!r} is not a condition of this run; conditions: {conds}"
        if len(set(alternatives)) != len(alternatives) or not alternatives or alternatives[0] != cond:
            return f"{cond}: expected [{cond}, alternatives...] without repeats, got {list(alternatives)}"
    return None


#: Cross-field checks run after every key validated on its own (:data:`SCHEMA`); each names its dotted key.
RULES: tuple[Rule, ...] = (
    less_than("contexts.min_context_tokens", "contexts.max_context_tokens"),
    less_than("chunking.min_chunk_tokens", "chunking.max_chunk_tokens"),
    *rank_cut_rules(),
    at_most("stats.recipe_k", "retrieve.k"),
    Rule("retrieve.modes", _modes, "the dense mode is among them, and no embedder is named as another mode's "
         "retriever"),
    Rule("retrieve.fusion", _fusion, "a weight above 0, and a depth of at least retrieve.k"),
    one_of("embed.strong", "the keys of embed.embedders", _embedders, unless_empty=True),
    one_of("stats.primary_reranker", "'none' or the keys of retrieve.rerankers",
           lambda d: ["none", *d["retrieve"]["rerankers"]]),
    one_of("stats.primary_metric", "the metric names of the metrics section", _metric_names),
    Rule("stats.contrasts", _contrasts, "each contrast is two different conditions of chunking.conditions, and no "
         "pair (or its reverse) is declared twice"),
    Rule("stats.power_n_boot", _power_can_reject, "a simulated study can reach Holm p < alpha"),
    Rule("stats.sesoi_by_metric", _sesoi_bounds, "a positive bound per metric of the run"),
    Rule("conditions.extra", _extra_conditions, "user conditions are named apart and complete"),
    Rule("conditions.extra", _late_embedders, "a late-pooled condition runs beside sentence-transformers embedders in "
         "torch only"),
    Rule("embed.late_window", _late_window, "the late-pooling window fits every encoder's positions"),
    Rule("embed.late_overlap", _late_overlap, "the windows' overlap is below a window's content tokens"),
    Rule("contrasts.extra", _extra_contrasts, "each user contrast is two different conditions of the run, and no pair "
         "(or its reverse) is declared twice"),
    *(Rule(f"multiverse.{k}", _multiverse_axis(k), "the axis holds alternatives the run computes and the primary "
           "specification's value") for k in ("metrics", "cutoffs", "embedders", "rerankers", "query_types",
                                             "bootstrap_seeds")),
    Rule("multiverse.conditions", _multiverse_conditions, "each stand-in is a condition of the run"),
)

