"""Progress: a loop under the runner writes throttled records to the progress file; the runner's Tail renders one
line per loop (rewritten in place on a terminal, sparse in a log) and a final summary with the time."""

import io
import json

from chunkstudy import progress


def test_loop_writes_throttled_records_with_a_final_one(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv(progress.ENV, str(path))
    monkeypatch.setenv(progress.STAGE_ENV, "04_chunk_embed")
    with progress.bar(total=5000, desc="embed strong (passage)", unit="text") as p:
        for _ in range(5000):
            p.update(1)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    # the first record (n = 0) and the last (done); 5,000 quick updates inside MIN_INTERVAL_S write nothing between
    assert len(recs) <= 4
    assert recs[0]["n"] == 0 and not recs[0]["done"]
    assert recs[-1] == {**recs[-1], "n": 5000, "total": 5000, "done": True, "stage": "04_chunk_embed",
                        "unit": "text", "desc": "embed strong (passage)"}


def test_track_counts_every_item(tmp_path, monkeypatch):
    path = tmp_path / "p.jsonl"
    monkeypatch.setenv(progress.ENV, str(path))
    assert list(progress.track(range(7), desc="x")) == list(range(7))
    last = json.loads(path.read_text().splitlines()[-1])
    assert (last["n"], last["total"], last["done"]) == (7, 7, True)


def test_without_the_runner_a_tqdm_bar_is_used(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    with progress.bar(total=3, desc="plain") as p:
        p.update(3)
        assert p.n == 3 and type(p).__name__ != "_FileBar"


def _records(n_updates: int, total: int = 100) -> list[dict]:
    base = {"id": "1-1", "stage": "05_retrieve", "desc": "rerank", "unit": "pair", "total": total}
    recs = [{**base, "n": i // 10, "elapsed": 0.01 * i, "done": False} for i in range(n_updates)]
    return recs + [{**base, "n": total, "elapsed": 4.0, "done": True}]


def test_a_sub_second_loop_and_an_empty_one_print_nothing_in_a_log(tmp_path, monkeypatch):
    base = {"id": "1-2", "stage": "06_metrics", "desc": "score", "unit": "list", "total": 10}
    recs = [{**base, "n": 0, "elapsed": 0.0, "done": False}, {**base, "n": 10, "elapsed": 0.4, "done": True}]
    _, out, _ = _feed(tmp_path, recs, tty=False)
    assert out.getvalue() == ""
    recs = [{**base, "n": 0, "elapsed": 0.0, "done": False}, {**base, "n": 10, "elapsed": 1.5, "done": False},
            {**base, "n": 10, "elapsed": 1.5, "done": True}]
    _, out, _ = _feed(tmp_path, recs, tty=False)
    assert out.getvalue() == "06_metrics | score: 10 list in 0:02 (6.67 list/s)\n"  # no 100% line before it
    path = tmp_path / "empty.jsonl"
    monkeypatch.setenv(progress.ENV, str(path))
    with progress.bar(total=0, desc="nothing") as p:
        p.update(0)
    assert not path.exists()


def _feed(tmp_path, recs, tty, torn_tail=b""):
    path = tmp_path / "progress.jsonl"
    path.write_bytes(b"".join((json.dumps(r) + "\n").encode() for r in recs) + torn_tail)
    out = io.StringIO()
    tail = progress.Tail(path, out=out, tty=tty, log_interval_s=30.0)
    tail.poll()
    return tail, out, path


def test_tail_in_a_log_prints_a_start_line_and_a_summary_not_a_flood(tmp_path):
    _, out, _ = _feed(tmp_path, _records(1000), tty=False)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    # the loop's line once it has run a second (elapsed 0.01 s per record here), then its summary
    assert lines[0].startswith("05_retrieve | rerank:  10%") and "10/100" in lines[0]
    assert lines[1] == "05_retrieve | rerank: 100 pair in 0:04 (25.0 pair/s)"


def test_tail_on_a_terminal_rewrites_one_line(tmp_path):
    tail, out, _ = _feed(tmp_path, _records(3), tty=True)
    tail.stop()
    text = out.getvalue()
    assert text.count("\n") == 1  # only the summary ends a line
    assert text.count("\r\x1b[K") == 4
    assert "ETA" not in text and "<" in text  # tqdm's meter shows the remaining time as [elapsed<remaining]


def test_tail_waits_for_a_line_still_being_written(tmp_path):
    rec = _records(0)[-1]
    half = json.dumps(rec).encode()
    tail, out, path = _feed(tmp_path, [], tty=False, torn_tail=half[:20])
    assert out.getvalue() == ""
    with open(path, "ab") as f:
        f.write(half[20:] + b"\n")
    tail.poll()
    assert out.getvalue().endswith("100 pair in 0:04 (25.0 pair/s)\n")


def test_render_shows_count_rate_and_remaining_time():
    line = progress.render({"stage": "04_chunk_embed", "desc": "embed weak", "unit": "text", "n": 40, "total": 100,
                            "elapsed": 10.0})
    assert line.startswith("04_chunk_embed | embed weak:  40%")
    assert "40/100 [00:10<00:15,  4.00text/s]" in line


def test_a_note_is_printed_by_the_runner_and_is_no_warning(tmp_path, monkeypatch, capsys):
    """A client waiting on a silent server says so (:func:`progress.note`): a line in the runner's output, not one of
    the stage's warnings (the manifest and the report list those); outside the runner, on stderr."""
    path = tmp_path / "p.jsonl"
    monkeypatch.setenv(progress.ENV, str(path))
    monkeypatch.setenv(progress.STAGE_ENV, "04_chunk_embed")
    progress.note("embed.embedders.strong: waiting for http://h/v1/embeddings: 1 request in flight, ...")
    out = io.StringIO()
    tail = progress.Tail(path, out=out, tty=False)
    tail.poll()
    assert out.getvalue() == "04_chunk_embed | embed.embedders.strong: waiting for http://h/v1/embeddings: 1 request " \
                             "in flight, ...\n"
    assert tail.warnings == []
    monkeypatch.delenv(progress.ENV)
    progress.note("llm: waiting")
    assert capsys.readouterr().err == "llm: waiting\n"
