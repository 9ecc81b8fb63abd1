"""Acceptance: SIGKILL in the middle of stage 04 and a rerun give the same final tables as an uninterrupted run
(tests/kill_resume.py runs both, each in its own temporary project root)."""

import importlib.util
from pathlib import Path

import pytest


@pytest.mark.slow
def test_kill_in_04_and_resume_gives_identical_tables(tmp_path):
    spec = importlib.util.spec_from_file_location("kill_resume", Path(__file__).parent / "kill_resume.py")
    kr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kr)
    state = kr.kill_and_resume(tmp_path)
    print(state)
    assert not state["04_manifest_when_killed"] and state["shards_when_killed"] >= 1
    assert "03_queries" in state["manifests_when_killed"]
    assert state["kernels_left_running"] == []
    assert state["identical"] == ["chunks", "runs", "scores", "contrasts"]
    assert state["unencrypted_kernel_warnings"] == 0
