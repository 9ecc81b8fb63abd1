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

    artifacts.write_json(demo_cfg, "07_stats", "x", {"a": np.int64(3), "b": np.float32(0.5), "c": np.arange(2)})
    assert artifacts.read_json(demo_cfg, "07_stats", "x") == {"a": 3, "b": 0.5, "c": [0, 1]}


def test_written_files_get_ordinary_permissions(demo_cfg):
    import os
    import stat

    path = artifacts.write(demo_cfg, "corpus_funnel", pd.DataFrame({"step": ["a"], "count": [1]}))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
