"""Retrieval over CLIP_benchmark's WebDataset sets (`wds/<name>`): shards written with webdataset's own writer in
`clip_benchmark_export_wds`'s layout (clip_benchmark/webdataset_builder.py, `convert_retrieval_dataset`), scored by
CLIP_benchmark 1.6.2's own reader and `zeroshot_retrieval.evaluate` and by `compclip eval`."""
import argparse
import csv
import io
import json
import os
import random
import sys
import tarfile

import pytest
import torch
from PIL import Image

from conftest import run_main

BENCH_PATH = os.environ.get("COMPCLIP_BENCH_PATH")  # where `make test` installs CLIP_benchmark
FORMATS = {"webp": {"format": "webp", "lossless": True}, "png": {"format": "png"}, "jpg": {"format": "jpeg"}}  # its PIL_to_bytes
WORDS = ("a", "red", "small", "dog", "cat", "on", "the", "grass", "blue", "car", "near", "house", "two", "birds", "old", "tree")


def clip_benchmark():
    """CLIP_benchmark's modules, from the folder COMPCLIP_BENCH_PATH names or the environment."""
    if BENCH_PATH and BENCH_PATH not in sys.path:
        sys.path.insert(0, BENCH_PATH)
    return pytest.importorskip("clip_benchmark.metrics.zeroshot_retrieval"), pytest.importorskip("clip_benchmark.datasets.builder")


def noise_image(seed: int, fmt: str) -> bytes:
    """A seeded image of random pixels (distinct enough that a small random model ranks it apart), as the exporter saves it."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (24, 32, 3), generator=g, dtype=torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, **FORMATS[fmt])
    return buf.getvalue()


def samples(count: int) -> list[dict]:
    """`count` samples as `convert_retrieval_dataset` writes them: key, image bytes under its format, captions joined by
    line breaks. One's `.txt` ends in a line break and one caption holds U+2028 (both cut as `str.splitlines` cuts)."""
    rng = random.Random(7)
    made = []
    for i in range(count):
        fmt = ("webp", "png", "jpg")[i % 3]
        captions = [" ".join(rng.choices(WORDS, k=rng.randint(3, 7))) for _ in range(rng.randint(2, 4))]
        text = "\n".join(captions)
        if i == 3:
            text += "\n"  # two captions, not three: splitlines drops the end's empty piece
        if i == 4:
            text = text.replace(" ", "\u2028", 1)  # a line boundary to splitlines: one caption more
        made.append({"__key__": f"s{i:07d}", fmt: noise_image(i, fmt), "txt": text})
    return made


def write_set(folder, items, per_shard: int = 5) -> int:
    """A wds retrieval set as CLIP_benchmark's exporter writes it; the number of shards."""
    import webdataset as wds

    (folder / "test").mkdir(parents=True)
    (folder / "dataset_type.txt").write_text("retrieval\n")
    with wds.ShardWriter(str(folder / "test" / "%d.tar"), maxcount=per_shard, verbose=0) as sink:
        for item in items:
            sink.write(item)
        shards = sink.shard
    (folder / "test" / "nshards.txt").write_text(f"{shards}\n")
    return shards


def clip_benchmark_recalls(folder, model, preprocess, tokenizer) -> tuple[dict, int]:
    """CLIP_benchmark's own figures for the set in `folder`: its wds reader, its collate, its `evaluate` (fp32), and the
    number of captions its reader gives."""
    zeroshot_retrieval, builder = clip_benchmark()
    dataset = builder.build_dataset("wds/set", root=str(folder), transform=preprocess, split="test", task="zeroshot_retrieval")
    loader = torch.utils.data.DataLoader(dataset, batch_size=7, num_workers=0, collate_fn=builder.image_captions_collate_fn)
    captions = sum(len(captions) for _, batch in loader for captions in batch)
    return zeroshot_retrieval.evaluate(model, loader, tokenizer, "cpu", amp=False, recall_k_list=[1, 5, 10]), captions


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from compclip.models import load_model, save_checkpoint

    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    folder = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(model, folder)
    return folder, model.eval(), preprocess, tokenizer


def test_wds_set_scores_as_clip_benchmark_and_names_the_sample_without_captions_and_the_missing_shard(tmp_path, capsys,
                                                                                                    tiny_checkpoint):
    """24 samples in shards of 5 (0.tar ... 4.tar); shard 2.tar is missing though nshards.txt lists it, and one sample of
    1.tar has no `.txt`. `compclip eval` scores the rest, names both, marks the result incomplete, and its recalls are
    CLIP_benchmark's on a set of exactly those samples (written apart, the same bytes)."""
    checkpoint, model, preprocess, tokenizer = tiny_checkpoint
    everything = samples(24)
    del everything[7]["txt"]  # the second sample of 1.tar
    root = tmp_path / "data"
    assert write_set(root / "retrieval" / "mscoco_captions", everything) == 5
    (root / "retrieval" / "mscoco_captions" / "test" / "2.tar").unlink()  # samples 10-14
    scored = [s for i, s in enumerate(everything) if i != 7 and not 10 <= i < 15]
    write_set(tmp_path / "theirs", scored, per_shard=4)  # other shard cuts: the order is what counts
    theirs, their_captions = clip_benchmark_recalls(tmp_path / "theirs", model, preprocess, tokenizer)

    out = tmp_path / "results"
    code, said, err = run_main(capsys, "eval", "--model", checkpoint, "--benchmark", "retrieval", "--data-root", root, "--out", out,
                               "--workers", 0, "--device", "cpu")
    assert code in (0, None) and "(incomplete)" in said and "Traceback" not in err, err[-3000:]
    record = json.loads((out / "retrieval.json").read_text())
    m = record["metrics"]["mscoco_captions"]
    expected_captions = sum(len(s["txt"].splitlines()) for s in scored)
    assert (m["layout"], m["images"], m["captions"]) == ("wds", 18, expected_captions) == ("wds", 18, their_captions)
    for key, value in theirs.items():
        assert m[key] == pytest.approx(value, abs=1e-9), key
    assert 0 < theirs["image_retrieval_recall@1"] < 1 and 0 < theirs["text_retrieval_recall@5"] < 1  # neither trivial
    shards = root / "retrieval" / "mscoco_captions" / "test"
    assert record["complete"] is False
    assert record["absent"] == {
        str(shards / "2.tar"): "missing: test/nshards.txt lists 5 shards; the samples of this one are not scored",
        f"{shards / '1.tar'} record sample s0000007": "malformed, skipped: no captions (.txt)"}
    assert f"{shards / '2.tar'} missing" in err and "s0000007" in err

    # clip_benchmark build reads the result: the set's figures under CLIP_benchmark's names
    clip_benchmark()
    from clip_benchmark.cli import main_build

    main_build(argparse.Namespace(files=[str(out)], output=str(tmp_path / "build.csv")))
    with open(tmp_path / "build.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["mscoco_captions_image_retrieval_recall@5"]) == pytest.approx(theirs["image_retrieval_recall@5"])


@pytest.mark.parametrize(("count", "expected"), [
    ("five\n", "'five' is not a number of shards; the file holds one whole number, n for shards 0.tar ... {n-1}.tar"),
    ("0\n", "0 shards; a set has at least one (0.tar)"),
])
def test_a_shard_count_that_is_no_count_is_one_line_and_nothing_scored(tmp_path, capsys, count, expected):
    """A benchmark whose file is unusable: one line naming the file, its result written with why, exit 1."""
    folder = tmp_path / "retrieval" / "flickr30k"
    (folder / "test").mkdir(parents=True)
    (folder / "dataset_type.txt").write_text("retrieval\n")
    (folder / "test" / "nshards.txt").write_text(count)
    code, _, err = run_main(capsys, "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", tmp_path,
                            "--out", tmp_path / "out", "--workers", 0, "--device", "cpu")
    why = f"{folder / 'test' / 'nshards.txt'}: {expected}"
    assert code == 1 and f"retrieval: cannot run: {why}\n" in err and "Traceback" not in err, err[-2000:]
    record = json.loads((tmp_path / "out" / "retrieval.json").read_text())
    assert (record["complete"], record["lacks"]) == (False, why)


def test_a_classification_set_and_a_cut_shard_are_named_not_scored(tmp_path):
    """A wds set without `dataset_type.txt` is, to CLIP_benchmark, classification: named, no pairs. A shard cut off in
    its last sample's image is named with the sample where reading stopped; the complete samples before it are scored."""
    from compclip.eval import REGISTRY, DualEncoderScorer
    from compclip.models import load_model

    classification = tmp_path / "retrieval" / "cls"
    write_set(classification, samples(3))
    (classification / "dataset_type.txt").unlink()
    cut = tmp_path / "retrieval" / "cut"
    write_set(cut, samples(6), per_shard=6)
    with tarfile.open(cut / "test" / "0.tar") as tar:
        last_image = next(m for m in tar if m.name == "s0000005.jpg")
    with open(cut / "test" / "0.tar", "r+b") as f:
        f.truncate(last_image.offset_data + 100)  # cut off inside the last sample's image
    result = REGISTRY["retrieval"].run(DualEncoderScorer(*load_model("compclip-tiny-clip"), workers=0), tmp_path, "strict")
    assert not result.complete
    assert result.absent[str(classification / "dataset_type.txt")].startswith("'classification': CLIP_benchmark reads the set as")
    assert result.metrics["cls"]["images"] == 0
    assert result.absent[str(cut / "test" / "0.tar")] == ("unreadable tar (ReadError: unexpected end of data): its samples "
                                                          "from s0000005 on are not scored")
    assert result.metrics["cut"]["images"] == 5


def test_see_through_and_16_bit_images_of_a_wds_set_are_clip_benchmarks_pixels_and_recalls(tmp_path, capsys, tiny_checkpoint):
    """RGBA, transparent palette and 16-bit grey PNGs in a wds retrieval set: each image's pixels are those CLIP_benchmark's
    reader gives (webdataset's "pil" decoding), its recalls CLIP_benchmark's; retrieval.colours=viewer gives compclip's
    viewer's colours and records the departure."""
    import numpy as np

    from compclip.data.readers import to_rgb
    from compclip.eval.benchmarks.wds_retrieval import read_wds
    from test_zeroshot_layouts import assert_scored_apart, encoded, see_through

    checkpoint, model, preprocess, tokenizer = tiny_checkpoint
    items = [{**item, "png": encoded(see_through(k), "png")} for k, item in enumerate(samples(12))]
    for item in items:  # one image a sample: the PNG
        item.pop("webp", None), item.pop("jpg", None)
    folder = tmp_path / "data" / "retrieval" / "flickr30k"
    write_set(folder, items)
    _, builder = clip_benchmark()
    theirs = builder.build_dataset("wds/set", root=str(folder), transform=lambda image: image, split="test", task="zeroshot_retrieval")
    pixels = [np.asarray(image) for image, _ in theirs]
    viewed = [np.asarray(to_rgb(Image.open(io.BytesIO(item["png"])))) for item in items]
    for colours, expected in (("clip_benchmark", pixels), ("viewer", viewed)):
        refs = list(dict.fromkeys(ref for ref, _ in read_wds(folder, colours).pairs))
        assert [np.array_equal(np.asarray(ref.decode()), e) for ref, e in zip(refs, expected, strict=True)] == [True] * len(items), colours
    assert not any(np.array_equal(view, pixel) for view, pixel in zip(viewed, pixels, strict=True))

    recalls, _ = clip_benchmark_recalls(folder, model, preprocess, tokenizer)
    records = {}
    for colours in ("clip_benchmark", "viewer"):
        out = tmp_path / colours
        code, _, err = run_main(capsys, "eval", "--model", checkpoint, "--benchmark", "retrieval", "--data-root", tmp_path / "data",
                                "--out", out, "--workers", 0, "--device", "cpu", "--ties", "clip_benchmark",
                                "--bench-opt", f"retrieval.colours={colours}")
        assert code in (0, None), err[-2000:]
        records[colours] = json.loads((out / "retrieval.json").read_text())
    for key, value in recalls.items():
        assert records["clip_benchmark"]["metrics"]["flickr30k"][key] == pytest.approx(value, abs=1e-9), key
    assert not records["clip_benchmark"].get("departures")
    assert any("retrieval.colours=viewer" in said for said in records["viewer"]["departures"])
    assert_scored_apart(tmp_path, "retrieval")
