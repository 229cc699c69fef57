"""Dataset readers: the published layouts read back, and every error names the file and the
field (or key / folder) that is wrong."""
import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from components.common.readers import (DatasetError, image_folder, iter_jsonl, load_image, read_jsonl,
                                       read_npz, read_parquet)
from tests.paper.layouts import write_c4, write_image_folder, write_jsonl, write_npz


def test_jsonl_reads_c4_shards_by_glob(tmp_path):
    root = write_c4(tmp_path, n_train=10, n_validation=4, shards=2)
    docs = read_jsonl(f"{root}/en/c4-train.*.json.gz", schema={"text": str, "url": str})
    assert len(docs) == 10 and all(d["text"] for d in docs)
    assert len(read_jsonl(f"{root}/en/c4-train.*.json.gz", limit=3)) == 3


def test_jsonl_errors_name_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"text": "ok"}, {"txt": "typo"}])
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: missing field 'text'"):
        read_jsonl(path.as_posix(), schema={"text": str})
    path = write_jsonl(tmp_path / "typed.jsonl", [{"text": 3}])
    with pytest.raises(DatasetError, match=r"typed\.jsonl:1: field 'text' must be str, got int"):
        read_jsonl(path.as_posix(), schema={"text": str})
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as f:
        f.write(json.dumps({"text": "a"}) + "\n{not json\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl\.gz:2: not valid JSON"):
        list(iter_jsonl(bad.as_posix()))
    with pytest.raises(DatasetError, match="no such file"):
        read_jsonl((tmp_path / "missing-*.jsonl").as_posix())


def test_jsonl_through_fsspec_memory_filesystem():
    import fsspec

    with fsspec.open("memory://bucket/rows.jsonl", "w") as f:
        f.write('{"prompt": "p", "answer": 1}\n')
    assert read_jsonl("memory://bucket/rows.jsonl", schema={"prompt": str, "answer": int}) == [
        {"prompt": "p", "answer": 1}]


def test_parquet_columns_and_types(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"question": ["q"], "label": [1]}), path)
    assert read_parquet(path.as_posix(), {"question": "string", "label": "integer"}).num_rows == 1
    with pytest.raises(DatasetError, match=r"t\.parquet: missing column 'answer'"):
        read_parquet(path.as_posix(), ["question", "answer"])
    with pytest.raises(DatasetError, match=r"t\.parquet: column 'label' must be floating"):
        read_parquet(path.as_posix(), {"label": "floating"})
    (tmp_path / "junk.parquet").write_text("nope")
    with pytest.raises(DatasetError, match=r"junk\.parquet: not a parquet file"):
        read_parquet((tmp_path / "junk.parquet").as_posix())


def test_npz_keys_and_dims(tmp_path):
    path = write_npz(tmp_path / "d.npz", x=np.zeros((4, 3)), y=np.arange(4))
    arrays = read_npz(path.as_posix(), {"x": 2, "y": 1})
    assert arrays["x"].shape == (4, 3)
    with pytest.raises(DatasetError, match=r"d\.npz: missing array 'z'"):
        read_npz(path.as_posix(), ["x", "z"])
    with pytest.raises(DatasetError, match=r"d\.npz: array 'y' must have 2 dims"):
        read_npz(path.as_posix(), {"y": 2})


def test_image_folders_class_and_domain_layouts(tmp_path):
    root = write_image_folder(tmp_path / "imgs", ["cat", "dog"], per_class=2)
    records, classes = image_folder(root.as_posix())
    assert classes == ["cat", "dog"] and [r.label for r in records] == [0, 0, 1, 1]
    image = load_image(records[0].path, size=8, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert image.shape == (3, 8, 8) and image.dtype == torch.float32 and -1 <= image.min() <= image.max() <= 1

    droot = write_image_folder(tmp_path / "pacs", ["cat", "dog"], per_class=1, domains=["art", "photo"])
    records, classes = image_folder(droot.as_posix(), layout="domain/class")
    assert {(r.domain, r.class_name, r.label) for r in records} == {
        ("art", "cat", 0), ("art", "dog", 1), ("photo", "cat", 0), ("photo", "dog", 1)}
    with pytest.raises(DatasetError, match="wrong depth"):
        image_folder(droot.as_posix(), layout="class")
    for f in (droot / "photo" / "dog").iterdir():
        f.unlink()
    (droot / "photo" / "dog").rmdir()
    with pytest.raises(DatasetError, match=r"photo: missing class folder\(s\) \['dog'\]"):
        image_folder(droot.as_posix(), layout="domain/class")
    with pytest.raises(DatasetError, match="not a folder"):
        image_folder((tmp_path / "none").as_posix())
    (tmp_path / "fake.png").write_text("x")
    with pytest.raises(DatasetError, match=r"fake\.png: not a readable image"):
        load_image((tmp_path / "fake.png").as_posix())
