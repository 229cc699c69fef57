"""The paper's four corpora written in their published layouts (generated toy text, never
downloaded): The Pile (.jsonl.zst), Wikipedia and FineWeb-Edu (parquet); C4 comes from
tests/paper/layouts.py."""
import json
from pathlib import Path

from tests.paper.layouts import documents


def write_zst_jsonl(path: Path, records: list[dict]) -> Path:
    """JSON lines compressed with zstd (pyarrow's codec), as The Pile ships them."""
    import pyarrow as pa

    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as raw, pa.CompressedOutputStream(raw, "zstd") as out:
        out.write("".join(json.dumps(r) + "\n" for r in records).encode())
    return path


def write_pile(root: Path, n_train: int = 240, n_val: int = 60, shards: int = 2) -> Path:
    """The Pile: train/00.jsonl.zst, 01.jsonl.zst ..., val.jsonl.zst and test.jsonl.zst, each
    line {"text": ..., "meta": {"pile_set_name": ...}}."""
    def records(docs):
        return [{"text": t, "meta": {"pile_set_name": "Pile-CC"}} for t in docs]

    train = documents(n_train, seed=1)
    for shard in range(shards):
        write_zst_jsonl(root / "train" / f"{shard:02d}.jsonl.zst", records(train[shard::shards]))
    write_zst_jsonl(root / "val.jsonl.zst", records(documents(n_val, seed=2)))
    write_zst_jsonl(root / "test.jsonl.zst", records(documents(n_val, seed=3)))
    return root


def write_parquet_shards(folder: Path, names: list[str], rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        part = rows[i::len(names)]
        pq.write_table(pa.Table.from_pylist(part), folder / name, row_group_size=16)


def write_wikipedia(root: Path, n: int = 80) -> Path:
    """wikimedia/wikipedia: <date>.<lang>/train-0000i-of-0000n.parquet, columns id/url/title/text."""
    rows = [{"id": str(i), "url": f"https://en.wikipedia.org/wiki?curid={i}", "title": f"Article {i}",
             "text": t} for i, t in enumerate(documents(n, seed=4))]
    write_parquet_shards(root / "20231101.en", [f"train-0000{i}-of-00002.parquet" for i in range(2)], rows)
    return root


def write_fineweb_edu(root: Path, n: int = 80) -> Path:
    """HuggingFaceFW/fineweb-edu: sample/10BT/00i_00000.parquet with the published columns."""
    rows = [{"text": t, "id": f"<urn:uuid:{i}>", "dump": "CC-MAIN-2024-10", "url": f"https://example.org/{i}",
             "file_path": "s3://commoncrawl/x.warc.gz", "language": "en", "language_score": 0.95,
             "token_count": len(t.split()), "score": 3.1, "int_score": 3}
            for i, t in enumerate(documents(n, seed=5))]
    write_parquet_shards(root / "sample" / "10BT", [f"00{i}_00000.parquet" for i in range(2)], rows)
    return root
