"""Training-data formats: one module each under `compclip/data/formats/`, found by path; a format from another package
trains and feeds `compclip concepts` with no edit to compclip."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import compclip.data.formats
from compclip.data import FORMATS, data_format, open_reader
from compclip.errors import DataError, UsageError
from test_train import make_dataset


def samples(reader) -> list[tuple[str, np.ndarray]]:
    return [(s["caption"], np.asarray(s["image"])) for s in reader]


def test_a_jsonl_table_reads_as_the_csv_of_the_same_rows(tmp_path, caplog):
    """The same 12 rows as CSV and as JSON lines give the same samples; a line that is no JSON, and one that is a JSON
    list, are bad records counted as such and named by their lines (5 and 6), and `compclip concepts` reads the same
    captions (None for those two)."""
    from compclip.concepts import iter_captions

    csv_file = make_dataset(tmp_path, n=12)
    rows = [line.split(",", 1) for line in csv_file.read_text().splitlines()[1:]]
    lines = [json.dumps({"caption": caption, "image": image, "other": 1}) for image, caption in rows]
    lines[4:4] = ["{not json", '["img/0.jpg", "a list"]', ""]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    table = open_reader(csv_file)
    jsonl = open_reader(tmp_path / "train.jsonl")
    got, want = samples(jsonl), samples(table)
    assert [c for c, _ in got] == [c for c, _ in want] and len(got) == 12
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
    assert jsonl.stats()["bad_record"] == 2 and jsonl.num_records() == 14
    assert f"skipped bad record: {tmp_path / 'train.jsonl'}:5 (not JSON" in caplog.text
    assert f"skipped bad record: {tmp_path / 'train.jsonl'}:6 (a JSON list, not a record)" in caplog.text
    assert jsonl.record_at(3)[1] == tmp_path / "img" / "3.jpg" and jsonl.record_at(4)[1] is None
    captions = [c for _, c in rows]
    assert list(iter_captions(tmp_path / "train.jsonl")) == [*captions[:4], None, None, *captions[4:]]
    assert list(iter_captions(csv_file)) == captions


def test_a_jsonl_whose_first_record_lacks_the_key_is_refused_naming_its_fields(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"filepath": "a.jpg", "caption": "a red cube"}\n')
    with pytest.raises(DataError, match=r"t.jsonl: no field \['image'\] in its first record \(fields: \['filepath', 'caption'\]\)"):
        open_reader(tmp_path / "t.jsonl")
    assert open_reader(tmp_path / "t.jsonl", image_key="filepath").record_at(0)[1] == tmp_path / "a.jpg"


def test_every_format_is_one_module_and_a_path_finds_its_own():
    """Each module of `data/formats/` registers one format, and each path names exactly one of them (a path two formats
    claimed would read by whichever registered first)."""
    modules = {p.stem for p in Path(compclip.data.formats.__file__).parent.glob("[!_]*.py")}
    assert len(FORMATS) == len(modules) == 5
    paths = {"csv": ["a.csv", "b.TSV", "c.tab"], "jsonl": ["a.jsonl"], "captions_json": ["captions_train2017.json"],
             "image_array": ["world/images.npy", "a/images.npy::b/images.npy"],
             "webdataset": ["shards/cc3m-{000000..000331}.tar", "one.tar", "pipe:curl -s https://x/a-{0..9}.tar"]}
    assert set(paths) == set(FORMATS.names())
    for name, examples in paths.items():
        for path in examples:
            assert [f for f in FORMATS.names() if FORMATS[f].matches(path)] == [name], path
            assert data_format(path) is FORMATS[name]
    with pytest.raises(UsageError) as refused:
        data_format("train.parquet")
    assert all(FORMATS[name].describe in str(refused.value) for name in FORMATS.names())


def test_what_a_run_passes_each_reader_is_what_its_format_declares():
    from compclip.data import reader_options

    given = {"image_key": "filepath", "caption_key": "title", "image_root": "/images"}
    assert reader_options("a.csv", **given) == given == reader_options("a.jsonl", **given)
    assert reader_options("s-{0..3}.tar", **given) == {"caption_key": "title"} == reader_options("images.npy", **given)
    assert reader_options("captions.json", **given) == {"image_root": "/images"}


PARQUET_FORMAT = '''
"""Parquet tables of image paths and captions: a data format of another package."""
from pathlib import Path

import pyarrow.parquet as pq

from compclip.data import DataFormat, FORMATS
from compclip.data.readers import TableReader, image_path


class ParquetReader(TableReader):
    def __init__(self, path, transform=None, image_key="image", caption_key="caption", image_root=None, **stages):
        self.path = Path(path)
        super().__init__(str(self.path), transform, **stages)
        self.keys, self.image_root = (image_key, caption_key), Path(image_root) if image_root else self.path.parent

    def _rows_of(self):
        for i, row in enumerate(pq.read_table(self.path, columns=list(self.keys)).to_pylist()):
            yield f"{self.path} row {i}", image_path(self.image_root, row[self.keys[0]]), row[self.keys[1]], None


FORMATS.register("parquet", DataFormat(
    "parquet", ".parquet", lambda path: path.endswith(".parquet"), ParquetReader, ("image_key", "caption_key", "image_root"),
    lambda path, key: iter(pq.read_table(path, columns=[key]).column(key).to_pylist()),
    count=lambda path: pq.read_metadata(path).num_rows))
'''


def test_a_data_format_from_another_package_trains_and_feeds_concepts(tmp_path):
    """An installed package's `compclip.data_formats` entry point registers its format: `compclip train` and `compclip
    concepts` read a Parquet table with no edit to compclip, and `--image-key` reaches its reader."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    csv_file = make_dataset(tmp_path / "data", n=16)
    rows = [line.split(",", 1) for line in csv_file.read_text().splitlines()[1:]]
    pq.write_table(pa.table({"filepath": [r[0] for r in rows], "caption": [r[1] for r in rows]}), tmp_path / "data" / "train.parquet")
    (tmp_path / "parquet_format.py").write_text(PARQUET_FORMAT)
    info = tmp_path / "parquet_format-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: parquet-format\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[compclip.data_formats]\nparquet = parquet_format\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    data = str(tmp_path / "data" / "train.parquet")
    concepts = subprocess.run([sys.executable, "-m", "compclip", "-q", "concepts", data, "--out", str(tmp_path / "store"),
                               "--what", "noun-phrases", "--workers", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert concepts.returncode == 0, concepts.stderr
    from compclip.concepts import ConceptStore

    assert len(ConceptStore(tmp_path / "store")) == len({r[1] for r in rows})
    train = subprocess.run([sys.executable, "-m", "compclip", "-q", "train", "--method", "clip", "--model", "compclip-tiny-clip",
                            "--train-data", data, "--image-key", "filepath", "--out", str(tmp_path / "run"), "--steps", "2",
                            "--batch-size", "8", "--workers", "0", "--device", "cpu"], capture_output=True, text=True, env=env, timeout=300)
    assert train.returncode == 0, train.stderr
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "loss" in r] == [1, 2]
    (checkpoint,) = (tmp_path / "run" / "checkpoints").glob("step_*/config.json")
    files = json.loads(checkpoint.read_text())["train_data_files"]  # the table and the images its rows name, hashed
    assert files["files"] == 1 and files["images_hashed"] == 16


def test_a_run_looks_for_its_files_before_it_starts_except_streamed_shards(tmp_path):
    """A CSV, a JSONL and an array (with the captions beside it) that are not there are named before anything is built;
    shards are read as met (a URL, a pipe, a shard that comes and goes), so a run on them is not refused for one."""
    from compclip.errors import MissingFileError
    from compclip.train import TrainConfig

    base = {"method": "clip", "model": "compclip-tiny-clip", "out": str(tmp_path / "run")}
    (tmp_path / "world").mkdir()
    np.save(tmp_path / "world" / "images.npy", np.zeros((1, 8, 8, 3), np.uint8))
    for data, named in ((tmp_path / "a.csv", tmp_path / "a.csv"), (tmp_path / "a.jsonl", tmp_path / "a.jsonl"),
                        (tmp_path / "world" / "images.npy", tmp_path / "world" / "scenes.jsonl")):
        with pytest.raises(MissingFileError, match=f"--train-data {named}: no such file"):
            TrainConfig(train_data=str(data), **base).validate()
    for data in (str(tmp_path / "gone-{0..3}.tar"), "pipe:cat /nowhere/a.tar"):
        assert data_format(data).missing_file(data) is None
        TrainConfig(train_data=data, **base).validate()


def test_a_name_is_registered_once_and_an_unknown_one_is_refused_with_the_known():
    assert FORMATS.names() == ["captions_json", "csv", "image_array", "jsonl", "webdataset"]
    with pytest.raises(ValueError, match="data format 'csv' is registered already"):
        FORMATS.register("csv", FORMATS["jsonl"])
    with pytest.raises(UsageError, match=r"unknown data format 'json' \(did you mean jsonl"):
        FORMATS["json"]
    csv = FORMATS.remove("csv")
    try:
        assert "csv" not in FORMATS and len(FORMATS) == 4
    finally:
        FORMATS.register("csv", csv)


def test_a_tab_file_is_tab_separated_as_a_tsv(tmp_path):
    """`.tab` and `.tsv` are both tab-separated tables (a caption holding a comma stays one field), for training and for
    `compclip concepts` alike."""
    from compclip.concepts import iter_captions

    csv_file = make_dataset(tmp_path, n=4)
    rows = [line.split(",", 1) for line in csv_file.read_text().splitlines()[1:]]
    rows[1][1] = "a red square, a blue circle"
    for suffix in ("tab", "tsv"):
        table = tmp_path / f"train.{suffix}"
        table.write_text("image\tcaption\n" + "".join(f"{image}\t{caption}\n" for image, caption in rows))
        assert [c for c, _ in samples(open_reader(table))] == [c for _, c in rows], suffix
        assert list(iter_captions(table)) == [c for _, c in rows], suffix


def test_concepts_name_a_missing_input_and_read_bytes_that_are_not_utf8_as_an_empty_record(tmp_path):
    """Each format's captions: a file that is not there is named before anything is read (for an array, the captions
    beside it); a caption whose bytes are not UTF-8 is an empty record, as training skips it, in a CSV and a JSONL alike."""
    from compclip.concepts import iter_captions
    from compclip.errors import MissingFileError

    for gone in ("gone.csv", "gone.jsonl", "gone.json"):
        with pytest.raises(MissingFileError, match=f"{gone}: no such file"):
            iter_captions(tmp_path / gone)
    np.save(tmp_path / "images.npy", np.zeros((1, 8, 8, 3), np.uint8))
    with pytest.raises(MissingFileError, match=r"scenes\.jsonl: no such file"):
        iter_captions(tmp_path / "images.npy")
    (tmp_path / "c.csv").write_bytes(b"image,caption\na.jpg,a red couch\nb.jpg,caf\xe9 chairs\n")
    (tmp_path / "c.jsonl").write_bytes(b'{"caption": "a red couch"}\n{"caption": "caf\xe9 chairs"}\n')
    for name in ("c.csv", "c.jsonl"):
        assert list(iter_captions(tmp_path / name)) == ["a red couch", None], name


def test_sources_joined_by_colons_are_read_as_one_only_where_the_format_can(tmp_path, capsys):
    """open_clip's `a::b` names several sources: arrays and shards read them as one; two CSVs (or JSONL files) are
    refused in one line by `train` and `concepts` alike, where the reader took the joined name for one file."""
    from conftest import run_main

    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text("image,caption\nx.jpg,a red cube\n")
    joined = f"{tmp_path / 'a.csv'}::{tmp_path / 'b.csv'}"
    for args in (["train", "--method", "clip", "--model", "compclip-tiny-clip", "--train-data", joined, "--out", str(tmp_path / "run")],
                 ["concepts", joined, "--out", str(tmp_path / "store")]):
        code, _, err = run_main(capsys, *args)
        assert code == 2 and "several csv sources joined by '::' are not read as one" in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "store").exists()
    assert data_format("w1/images.npy::w2/images.npy").name == "image_array"
    assert data_format("a-{0..3}.tar::b-{0..3}.tar").name == "webdataset"
    with pytest.raises(UsageError, match="several jsonl sources"):
        data_format("a.jsonl::b.jsonl")
