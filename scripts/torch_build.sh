#!/usr/bin/env bash
# scripts/torch_build.sh   which torch build this machine's .venv gets: prints `cpu` or `cuda` on stdout and why on
# stderr. Used by scripts/ensure_env.sh to pick the lock (cpu: constraints/cpu-lock.txt, torch 2.13.0+cpu;
# cuda: constraints/gpu-lock.txt, PyPI's torch 2.13.0 for Linux x86_64, a CUDA 13.0 build).
#   CHUNKSTUDY_TORCH=cpu|cuda   chooses; unset (or auto): cuda when `nvidia-smi -L` lists a GPU, else cpu.
set -euo pipefail
choice="${CHUNKSTUDY_TORCH:-auto}"
case "$choice" in
  cpu|cuda) echo "$choice"; echo "torch build: $choice (CHUNKSTUDY_TORCH=$choice)" >&2 ;;
  auto)
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    if [ "${gpus:-0}" -gt 0 ]; then
      echo cuda; echo "torch build: cuda (nvidia-smi -L lists $gpus GPU(s); CHUNKSTUDY_TORCH=cpu forces cpu)" >&2
    else
      echo cpu; echo "torch build: cpu (no GPU listed by nvidia-smi -L; CHUNKSTUDY_TORCH=cuda forces cuda)" >&2
    fi ;;
  *) echo "CHUNKSTUDY_TORCH=$choice: expected cpu, cuda or auto" >&2; exit 2 ;;
esac
