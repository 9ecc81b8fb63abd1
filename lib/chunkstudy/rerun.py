"""Why a stage runs again, in one line: what differs between the stage's manifest (what it recorded when it last
completed: its key, the parameters it read, the library files its notebook runs, its outputs' hashes) and now.

:func:`reason` is what the runner prints beside ``running ...`` (docs/running.md, "Why a stage reruns")::

    02_induce        running ...  (parameter induce.title_terms: 3 → 4)
    05_retrieve      running ...  (input chunks changed; code chunkstudy/retrieve/search.py changed)
    08_figures       running ...  (output figures/demo/report.md differs from what 08_figures wrote)
    01_corpus        running ...  (--force; nothing else changed)
    03_queries       running ...  (no manifest: it has not completed for corpus 'demo')

Each kind of change names at most :data:`SHOWN` items ("and 4 more"); the kinds come in the key's order: the
parameters, the inputs, the code, the notebook, the source files, the models, the user's own code, then (only when
the key is unchanged) the outputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import artifacts, codehash, config, manifests

#: At most this many names per kind of change in one line; the rest are counted.
SHOWN = 3
#: A parameter value longer than this many characters is shortened in the line.
VALUE_CHARS = 40


def reason(cfg: config.Config, stage: str, notebook: Path, key: dict, force: bool = False) -> str | None:
    """Why ``stage`` must run (one line), or None when its manifest holds ``key`` and every output it recorded is
    on disk unchanged (size and mtime, else a fresh content hash): the stage is current and ``force`` is off."""
    previous = artifacts.read_manifest(cfg, stage)
    if previous is None:
        return f"no manifest: it has not completed for corpus '{cfg.corpus}'"
    params_now = json.loads(json.dumps(config.digested(cfg.data, config.STAGE_SECTIONS[stage]), default=str))
    changes = key_changes(previous, key, params_now, codehash.library_files(notebook),
                          artifacts.project_relative(cfg, notebook))
    if not changes:
        now = manifests.hash_outputs(cfg, stage, previous["outputs"])
        changes = output_changes(stage, previous["outputs"], now)
    if force:
        return "--force; " + ("; ".join(changes) if changes else "nothing else changed")
    return "; ".join(changes) or None


def key_changes(previous: Mapping[str, Any], key: Mapping[str, Any], params_now: Mapping[str, Any],
                library_now: Mapping[str, str], notebook: str) -> list[str]:
    """What differs between the key a manifest (``previous``) recorded and ``key``, one phrase per kind: the
    parameters by name and value (from the manifest's ``params_read`` and ``params_now``), the inputs by artifact,
    the code by file (``library_files`` and ``library_now``), the notebook, source files by path, models by role,
    and any other field by its name."""
    old = previous.get("key") or {}
    out: list[str] = []
    for field in dict.fromkeys([*old, *key]):
        before, after = old.get(field), key.get(field)
        if before == after:
            continue
        if field == "params_digest":
            out.append(_parameters(previous.get("params_read"), params_now))
        elif field == "inputs":
            out += _compared("input", before, after)
        elif field == "library":
            files = _compared("code", previous.get("library_files"), library_now) if previous.get("library_files") \
                else []
            out += files or ["library code changed"]
        elif field == "notebook":
            out.append(f"notebook {notebook} changed")
        elif field == "sources":
            out += _compared("source file", _by_path(before), _by_path(after))
        elif field == "models":
            out += _compared("model", before, after, "changed (its files' content)")
        elif isinstance(before, dict) and isinstance(after, dict):  # e.g. 04's chunker_sources: a user's code
            out.append(f"{field} changed for {_listed(_changed(before, after))}")
        else:
            out.append(f"{field} changed")
    return out


def output_changes(stage: str, recorded: Mapping[str, Mapping], now: Mapping[str, Mapping]) -> list[str]:
    """What happened to a stage's outputs since it wrote them (``recorded``: its manifest's ``outputs``; ``now``:
    :func:`chunkstudy.manifests.hash_outputs` of the same folders): files missing, files whose content differs
    (a flipped byte, an edit by hand, a notebook run outside the runner), files that appeared."""
    gone = [p for p in recorded if p not in now]
    differ = [p for p in recorded if p in now and now[p]["sha256"] != recorded[p]["sha256"]]
    new = [p for p in now if p not in recorded]
    out = []
    if gone:
        out.append(_grouped("output", gone, "missing", be=True))
    if differ:
        out.append(_grouped("output", differ, f"differs from what {stage} wrote", plural=f"differ from what {stage} "
                                                                                            "wrote"))
    if new:
        out.append(_grouped("output", new, f"appeared since {stage} ran"))
    return out


def _parameters(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """``parameter a.b: 3 → 4`` (or ``parameters a.b: ..., c: ...``), from the digested values; a manifest that
    recorded none (written before it did) gives ``parameters changed``."""
    if not isinstance(before, Mapping):
        return "parameters changed"
    old, new = _flat(before), _flat(after)
    names = [k for k in dict.fromkeys([*old, *new]) if old.get(k, _UNSET) != new.get(k, _UNSET)]
    if not names:
        return "parameters changed"
    shown = [f"{k}: {_value(old.get(k, _UNSET))} → {_value(new.get(k, _UNSET))}" for k in names[:SHOWN]]
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"parameter{'s' * (len(names) > 1)} {', '.join(shown)}{more}"


class _Unset:
    def __repr__(self) -> str:
        return "(unset)"


_UNSET = _Unset()


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``{"induce": {"title_terms": 3}}`` -> ``{"induce.title_terms": 3}``)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, name + "."))
        else:
            out[name] = v
    return out


def _value(v: Any) -> str:
    text = repr(v) if v is _UNSET else json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 1] + "…"


def _compared(kind: str, before: Any, after: Any, verb: str = "changed") -> list[str]:
    """Phrases for two mappings of one kind of thing by name: those whose value differs (``verb``), those only
    ``after`` has (added) and those only ``before`` had (removed)."""
    before = before if isinstance(before, Mapping) else {}
    after = after if isinstance(after, Mapping) else {}
    differ = [k for k in before if k in after and before[k] != after[k]]
    added, removed = [k for k in after if k not in before], [k for k in before if k not in after]
    return [_grouped(kind, names, how) for names, how in ((differ, verb), (added, "added"), (removed, "removed"))
            if names]


def _changed(before: Any, after: Any) -> list[str]:
    """The names whose values differ between two mappings (one missing on either side counts)."""
    before = before if isinstance(before, Mapping) else {}
    after = after if isinstance(after, Mapping) else {}
    return [k for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k)]


def _by_path(files: Any) -> dict[str, Any]:
    """A key's source-file fingerprints by path."""
    return {str(f.get("path")): f for f in files} if isinstance(files, list) else {}


def _listed(names: list[str]) -> str:
    """``a, b, c and 2 more``: at most :data:`SHOWN` names."""
    return ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def _grouped(kind: str, names: Iterable[str], verb: str, plural: str | None = None, be: bool = False) -> str:
    """``output a differs ...``, ``outputs a, b, c and 2 more differ ...`` (``kind`` gets its plural's "s" on its
    last word, but for ``code``)."""
    names = list(names)
    many = len(names) > 1
    noun = kind + "s" * (many and kind != "code")
    verb = (("are " if many else "is ") + verb) if be else (plural if many and plural else verb)
    return f"{noun} {_listed(names)} {verb}"
