"""The environment a GPU machine gets (issue 21 §3): scripts/torch_build.sh decides cpu or cuda,
scripts/ensure_env.sh installs the matching lock (or, unlocked, the matching torch pin), and
constraints/gpu-lock.txt is the CPU lock with PyPI's CUDA torch. The shell logic runs here against a fake
``nvidia-smi`` and a fake interpreter that records what pip is asked; the lock resolves against PyPI in the slow
``pypi`` test (no GPU needed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints"


def lock_entries(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """``{name: (version, sha256 hashes)}`` of a pip lock with hashes."""
    out = {}
    for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?: \\\n    --hash=sha256:[0-9a-f]{64})+)",
                         path.read_text(), re.M):
        out[m.group(1).lower()] = (m.group(2), frozenset(re.findall(r"sha256:([0-9a-f]{64})", m.group(3))))
    return out


# ------------------------------------------------------------------------------------------- which build


def fake_bin(tmp_path: Path, gpus: int | None) -> Path:
    """A folder with an ``nvidia-smi`` listing ``gpus`` GPUs (None: none on the machine; -1: one that fails)."""
    b = tmp_path / "bin"
    b.mkdir(exist_ok=True)
    (b / "nvidia-smi").unlink(missing_ok=True)
    if gpus is not None:
        lines = "".join(f"GPU {i}: NVIDIA H200 (UUID: GPU-{i:08d})\\n" for i in range(max(gpus, 0)))
        body = "exit 9" if gpus < 0 else f"printf '{lines}'"
        (b / "nvidia-smi").write_text(f"#!/bin/sh\n{body}\n")
        (b / "nvidia-smi").chmod(0o755)
    return b


def torch_build(tmp_path: Path, gpus: int | None, choice: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CHUNKSTUDY_TORCH"}
    env["PATH"] = f"{fake_bin(tmp_path, gpus)}:/usr/bin:/bin"
    if choice is not None:
        env["CHUNKSTUDY_TORCH"] = choice
    return subprocess.run(["bash", str(ROOT / "scripts" / "torch_build.sh")], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("gpus, choice, build", [
    (2, None, "cuda"), (None, None, "cpu"), (0, None, "cpu"), (-1, None, "cpu"),
    (2, "cpu", "cpu"), (None, "cuda", "cuda"), (1, "auto", "cuda"),
])
def test_the_torch_build_follows_nvidia_smi_unless_chosen(tmp_path, gpus, choice, build):
    r = torch_build(tmp_path, gpus, choice)
    assert r.returncode == 0 and r.stdout == build + "\n", r.stderr
    assert r.stderr.startswith(f"torch build: {build} (")


def test_a_wrong_choice_is_named(tmp_path):
    r = torch_build(tmp_path, None, "rocm")
    assert r.returncode == 2 and "CHUNKSTUDY_TORCH=rocm: expected cpu, cuda or auto" in r.stderr


FAKE_PYTHON = """#!/usr/bin/env bash
# records every call; plays an interpreter just well enough for scripts/ensure_env.sh
echo "$*" >> "$FAKE_LOG"
case "$1" in
  --version) echo "Python 3.11.7" ;;
  -m) if [ "$2" = venv ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; fi ;;
  -c) case "$2" in *implementation*) echo "${FAKE_LOCKED:-1}" ;; *torch*) echo "2.13.0 CUDA 13.0" ;;
      *find_spec*) cd "$(dirname "$FAKE_LOG")/proj/lib/chunkstudy" && pwd -P ;;  # scripts/check_editable.sh
      *) echo "CPython 3.12.0 Linux x86_64" ;; esac ;;
esac
"""


def ensure_env(tmp_path: Path, gpus: int | None, **env_over: str) -> tuple[list[str], str, str]:
    """Run scripts/ensure_env.sh in a copy of the project with a fake interpreter: the pip calls it made, the
    stamp it wrote, and its messages."""
    proj = tmp_path / "proj"
    if not proj.exists():
        (proj / "scripts").mkdir(parents=True)
        for f in ("ensure_env.sh", "torch_build.sh", "check_editable.sh"):
            shutil.copy(ROOT / "scripts" / f, proj / "scripts" / f)
        (proj / "lib" / "chunkstudy").mkdir(parents=True)  # the editable install points here (the fake says so)
        shutil.copytree(CONSTRAINTS, proj / "constraints")
        shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
        (tmp_path / "python").write_text(FAKE_PYTHON)
        (tmp_path / "python").chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKSTUDY_", "PIP_"))}
    env.update(PATH=f"{fake_bin(tmp_path, gpus)}:/usr/bin:/bin", PYTHON=str(tmp_path / "python"),
               FAKE_LOG=str(log), **env_over)
    r = subprocess.run(["bash", "-c", f"source {proj}/scripts/ensure_env.sh"], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    pip = [c for c in log.read_text().splitlines() if c.startswith("-m pip install")]
    stamp = proj / ".venv" / ".deps-hash"
    return pip, stamp.read_text().strip() if stamp.exists() else "", r.stderr


def test_ensure_env_installs_the_gpu_lock_on_a_gpu_machine_and_says_so(tmp_path):
    pip, stamp, msg = ensure_env(tmp_path, gpus=1)
    assert any(c.endswith("--require-hashes -r " + str(tmp_path / "proj/constraints/gpu-lock.txt")) for c in pip)
    assert not any("cpu-lock.txt" in c for c in pip)
    assert stamp.endswith("-gpu-lock.txt")
    assert "torch build: cuda (nvidia-smi -L lists 1 GPU(s)" in msg
    assert "installing the locked environment (constraints/gpu-lock.txt)" in msg
    # the same machine forced to cpu reinstalls from the CPU lock (the stamp names the lock)
    pip, stamp, msg = ensure_env(tmp_path, gpus=1, CHUNKSTUDY_TORCH="cpu")
    assert any(c.endswith("-r " + str(tmp_path / "proj/constraints/cpu-lock.txt")) for c in pip)
    assert stamp.endswith("-cpu-lock.txt") and "(constraints/cpu-lock.txt)" in msg
    pip, _, _ = ensure_env(tmp_path, gpus=1, CHUNKSTUDY_TORCH="cpu")
    assert pip == []  # nothing changed: nothing reinstalled


def test_the_unlocked_branch_pins_the_torch_of_the_machine(tmp_path):
    pip, stamp, msg = ensure_env(tmp_path, gpus=2, CHUNKSTUDY_UNLOCKED="1")
    assert any("-c " + str(tmp_path / "proj/constraints/gpu.txt") in c for c in pip)
    assert not any("cpu.txt" in c for c in pip) and stamp.endswith("-gpu-lock.txt-unlocked")
    assert "constraints/gpu.txt pins torch" in msg
    pip, stamp, _ = ensure_env(tmp_path, gpus=None, CHUNKSTUDY_UNLOCKED="1")
    assert any("-c " + str(tmp_path / "proj/constraints/cpu.txt") in c for c in pip)


# ---------------------------------------------------------------------------------------------- the lock


def test_the_gpu_lock_is_the_cpu_lock_with_pypis_cuda_torch():
    cpu, gpu = lock_entries(CONSTRAINTS / "cpu-lock.txt"), lock_entries(CONSTRAINTS / "gpu-lock.txt")
    assert cpu["torch"][0] == "2.13.0+cpu" and gpu["torch"][0] == "2.13.0"
    assert len(gpu["torch"][1]) == 1  # the hash of the one wheel a GPU box installs
    for name, entry in cpu.items():
        if name != "torch":
            assert gpu.get(name) == entry, name  # same version, same hashes
    extra = sorted(set(gpu) - set(cpu))
    assert extra and all(n.startswith(("nvidia-", "cuda-")) or n == "triton" for n in extra), extra
    assert "nvidia-cublas" in extra and "nvidia-cudnn-cu13" in extra
    assert "torch==2.13.0" in (CONSTRAINTS / "gpu.txt").read_text().split()


def _pypi_reachable() -> str | None:
    try:
        urllib.request.urlopen("https://pypi.org/simple/torch/", timeout=15).close()
        return None
    except OSError as e:
        return f"PyPI is unreachable from here ({type(e).__name__}: {e}); the lock cannot be resolved"


TARGET = {"implementation_name": "cpython", "platform_python_implementation": "CPython", "python_version": "3.11",
          "python_full_version": "3.11.7", "sys_platform": "linux", "platform_system": "Linux",
          "platform_machine": "x86_64", "os_name": "posix", "platform_release": "", "platform_version": "",
          "implementation_version": "3.11.7", "extra": ""}


@pytest.mark.slow
@pytest.mark.pypi
def test_the_gpu_lock_resolves_with_hashes_for_cpython_311_on_linux(tmp_path):
    """pip resolves every pin of the lock for CPython 3.11 on manylinux x86_64 from PyPI alone, checking each
    downloaded file against the lock's hashes (--require-hashes; about 4 GB of wheels pass through a temporary
    folder); --no-deps because rouge-score is a source distribution, which pip only prepares for another platform
    that way, so the test checks from the report that every dependency of every package is in the lock."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    why = _pypi_reachable()
    if why:
        pytest.skip(why)
    platforms = [f"manylinux_2_{i}_x86_64" for i in range(28, 4, -1)] + [
        "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in ("PIP_CERT",)}
    env["PIP_CONFIG_FILE"] = os.devnull  # PyPI alone: no find-links, extra indexes or constraints of this machine
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--require-hashes", "--no-deps",
           "--prefer-binary", "--no-cache-dir", "--python-version", "3.11", "--implementation", "cp",
           *[a for p in platforms for a in ("--platform", p)], "--report", str(report),
           "-r", str(CONSTRAINTS / "gpu-lock.txt"), "-r", str(CONSTRAINTS / "nodeps-lock.txt")]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    items = json.loads(report.read_text())["install"]
    locked = {**lock_entries(CONSTRAINTS / "gpu-lock.txt"), **lock_entries(CONSTRAINTS / "nodeps-lock.txt")}
    got = {canonicalize_name(i["metadata"]["name"]): i for i in items}
    assert set(got) == {canonicalize_name(n) for n in locked}
    for name, (version, hashes) in locked.items():
        item = got[canonicalize_name(name)]
        assert item["metadata"]["version"] == version, name
        assert item["download_info"]["archive_info"]["hashes"]["sha256"] in hashes, name
    torch = got["torch"]
    assert torch["download_info"]["url"].endswith("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert any(d.startswith(("nvidia-cudnn-cu13", "cuda-toolkit[cublas")) for d in torch["metadata"]["requires_dist"])
    # complete: each dependency that applies on the target (markers, no extras) of the project (with its dev extra)
    # and of every locked package is in the lock, at a version it allows
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needs = [("chunkstudy", d) for d in project["dependencies"] + project["optional-dependencies"]["dev"]]
    nodeps = {canonicalize_name(n) for n in lock_entries(CONSTRAINTS / "nodeps-lock.txt")}
    needs = [(n, d, "") for n, d in needs] + [
        (name, d, "") for name, item in got.items() if name not in nodeps  # nodeps.txt: --no-deps on purpose
        for d in item["metadata"].get("requires_dist", [])]
    checked = 0
    while needs:  # a requirement with extras (torch needs cuda-toolkit[cublas, ...]) needs those extras' deps too
        name, dep, extra = needs.pop()
        req = Requirement(dep)
        if req.marker is not None and not req.marker.evaluate({**TARGET, "extra": extra}):
            continue
        have = got.get(canonicalize_name(req.name))
        assert have is not None, f"{name} needs {dep}: not in the lock"
        assert req.specifier.contains(Version(have["metadata"]["version"]), prereleases=True), (name, dep)
        needs += [(req.name, d, e) for e in req.extras for d in have["metadata"].get("requires_dist", [])
                  if "extra" in d]
        checked += 1
    assert checked > len(got)


def test_a_process_that_sourced_ensure_env_holds_the_environment_and_no_reinstall_runs_under_it(tmp_path):
    """Whoever sources ensure_env.sh (./run_all.sh, ./run_tests.sh, ./lab.sh) holds the environment's lock shared
    for as long as it runs; a second ensure_env.sh that would reinstall (here: another torch build, so another
    stamp) is refused while the first holds it, naming the lock, and installs nothing; once the first has ended it
    reinstalls. (On main the second reinstalled under the first.)"""
    ensure_env(tmp_path, gpus=None)  # the environment, installed once
    proj = tmp_path / "proj"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKSTUDY_", "PIP_"))}
    env.update(PATH=f"{fake_bin(tmp_path, None)}:/usr/bin:/bin", PYTHON=str(tmp_path / "python"),
               FAKE_LOG=str(tmp_path / "calls.log"))
    # a user of the environment: sourced it, says so, then works until its standard input closes
    user = subprocess.Popen(["bash", "-c", f"source {proj}/scripts/ensure_env.sh && echo ready && cat"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert user.stdout.readline() == "ready\n", user.stderr.read()
        (tmp_path / "calls.log").write_text("")
        r = subprocess.run(["bash", "-c", f"source {proj}/scripts/ensure_env.sh"], capture_output=True, text=True,
                           env={**env, "CHUNKSTUDY_TORCH": "cuda"})
        assert r.returncode == 2 and "must be reinstalled" in r.stderr and "another process is using it" in r.stderr
        assert f"{proj / '.venv'}.lock" in r.stderr
        assert not [c for c in (tmp_path / "calls.log").read_text().splitlines() if "pip install" in c]
    finally:
        user.stdin.close()
        user.wait()
    pip, stamp, _ = ensure_env(tmp_path, gpus=None, CHUNKSTUDY_TORCH="cuda")
    assert stamp.endswith("-gpu-lock.txt") and any("gpu-lock.txt" in c for c in pip)
