"""The artifact store: schema checks name the table, writes are atomic, reads say which stage writes a table."""

import pandas as pd
import pytest

from chunkstudy import artifacts


def test_write_read_roundtrip_with_list_columns(demo_cfg):
    df = pd.DataFrame({"query_id": ["q1"], "doc_id": ["d"], "qtype": ["factoid"], "text": ["?"],
                       "spans": [[[0, 5], [10, 12]]]})
    path = artifacts.write(demo_cfg, "queries", df)
    assert path == demo_cfg.root / "data" / "demo" / "03_queries" / "queries.parquet"
    back = artifacts.read(demo_cfg, "queries")
    assert [list(map(list, s)) for s in back["spans"]] == [[[0, 5], [10, 12]]]


def test_schema_error_names_table_and_missing_columns(demo_cfg):
    with pytest.raises(artifacts.SchemaError, match=r"queries: missing columns \['spans'\].*written by 03_queries"):
        artifacts.write(demo_cfg, "queries", pd.DataFrame({"query_id": [], "doc_id": [], "qtype": [], "text": []}))


def test_missing_table_says_which_notebook_writes_it(demo_cfg):
    with pytest.raises(FileNotFoundError, match="written by notebook 05_retrieve"):
        artifacts.read(demo_cfg, "runs")


def test_failed_write_leaves_previous_version_and_no_temp_files(demo_cfg):
    good = pd.DataFrame({"step": ["a"], "count": [1]})
    path = artifacts.write(demo_cfg, "corpus_funnel", good)

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with artifacts.atomic_path(path) as tmp:
            tmp.write_bytes(b"half a parquet file")
            raise Boom
    pd.testing.assert_frame_equal(artifacts.read(demo_cfg, "corpus_funnel"), good)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_json_roundtrip_numpy_values(demo_cfg):
    import numpy as np

    artifacts.write_json(demo_cfg, "04_chunk_embed", "summary", {"a": np.int64(3), "b": np.float32(0.5),
                                                                 "c": np.arange(2)})
    assert artifacts.read_json(demo_cfg, "04_chunk_embed", "summary") == {"a": 3, "b": 0.5, "c": [0, 1]}


def test_only_declared_json_files_are_written(demo_cfg):
    """A JSON file is an artifact like a table: a stage writes only those its declaration names, so the runner's
    keys and the notebook completeness test see every one."""
    with pytest.raises(KeyError, match=r"07_stats declares no JSON file 'x'; its JSON files: \[\]"):
        artifacts.write_json(demo_cfg, "07_stats", "x", {})
    with pytest.raises(KeyError, match="03_queries declares no JSON file 'summary'.*'funnel', 'bm25'"):
        artifacts.json_path(demo_cfg, "03_queries", "summary")   # declared, but by 04


def test_written_files_get_ordinary_permissions(demo_cfg):
    import os
    import stat

    path = artifacts.write(demo_cfg, "corpus_funnel", pd.DataFrame({"step": ["a"], "count": [1]}))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def _unchecked(cfg, name):
    """``cfg`` with a corpus name that load() refuses: each folder helper must still refuse to leave its root."""
    import copy
    from dataclasses import replace

    data = copy.deepcopy(cfg.data)
    data["corpus"]["name"] = name
    return replace(cfg, data=data)


@pytest.mark.parametrize("name", ["..", ".", "", "../..", "a/../.."])
def test_folder_helpers_refuse_paths_outside_their_root(demo_cfg, name):
    """Had such a name reached them, 'data/..' or 'figures/.' would have been the corpus's folder."""
    bad = _unchecked(demo_cfg, name)
    for helper in (lambda: artifacts.corpus_dir(bad), lambda: artifacts.stage_dir(bad, "01_corpus"),
                   lambda: artifacts.figures_dir(bad), lambda: artifacts.cache_dir(bad, "llm_cache")):
        with pytest.raises(artifacts.PathError, match="is not inside"):
            helper()


def test_names_from_data_or_code_cannot_leave_their_folder(demo_cfg):
    with pytest.raises(artifacts.PathError, match="cache folder '../x'"):
        artifacts.cache_dir(demo_cfg, "../x")
    with pytest.raises(artifacts.PathError, match="report file '../../x.md'"):
        artifacts.write_text(demo_cfg, "../../x.md", "x")
    with pytest.raises(artifacts.PathError, match="vectors of embedder '../w'"):
        artifacts.vectors_path(demo_cfg, "../w")
    with pytest.raises(artifacts.PathError, match="JSON file '../../x'"):
        artifacts.json_path(demo_cfg, "07_stats", "../../x")
    assert artifacts.write_text(demo_cfg, "tables/t.md", "ok").read_text() == "ok"


def test_project_relative_paths(demo_cfg):
    root = demo_cfg.root
    assert artifacts.project_relative(demo_cfg, root / "params" / "demo.yaml") == "params/demo.yaml"
    assert artifacts.project_relative(demo_cfg, root.parent / "shared" / "x.tgz") == "../shared/x.tgz"
    assert artifacts.project_relative(demo_cfg, "params/x.yaml") == "params/x.yaml"


@pytest.mark.parametrize("text", ['{"stage": "01_corpus", "key": {}}', '[]', '{"key": {}, "outputs": {"a": 1}}',
                                  '{"outputs": {}}', '{"key": {}, "outputs": {"a": {"size": 1}}}', '{trunc'])
def test_a_malformed_manifest_counts_as_absent(demo_cfg, text):
    path = artifacts.manifest_path(demo_cfg, "01_corpus")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert artifacts.read_manifest(demo_cfg, "01_corpus") is None
    path.write_text('{"key": {}, "outputs": {"a": {"sha256": "00", "size": 1, "mtime_ns": 2}}}')
    assert artifacts.read_manifest(demo_cfg, "01_corpus")["outputs"]["a"]["size"] == 1
