"""Readers over generated data with planted bad records: the counts must be exactly the planted ones."""
import io
import json
import logging
import math
import random
import tarfile
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

from compclip.data import CsvReader, FolderReader, WebDatasetReader, open_reader
from conftest import image_bytes, shared_data

GOOD = 11


def good_records():
    return [(f"img{i:02d}.jpg", f"caption number {i}") for i in range(GOOD)]


def write_images(folder, names_seeds):
    folder.mkdir(parents=True, exist_ok=True)
    for name, seed in names_seeds:
        (folder / name).write_bytes(image_bytes(seed, "PNG" if name.endswith(".png") else "JPEG"))


@pytest.fixture
def planted(tmp_path):
    """Image folder: 11 good images, a truncated JPEG, a garbage file; two names with no file."""
    root = tmp_path / "images"
    write_images(root, [(name, i) for i, (name, _) in enumerate(good_records())])
    truncated = image_bytes(99)
    (root / "truncated.jpg").write_bytes(truncated[: len(truncated) // 2])
    (root / "garbage.jpg").write_bytes(b"this is not an image at all")
    return root


def expected(**extra):
    base = {"read": GOOD, "missing_image": 2, "corrupt_image": 2, "empty_caption": 2, "undecodable_text": 0, "bad_record": 0,
            "image_too_large": 0, "not_admitted": 0}
    base.update(extra)
    base["skipped"] = sum(v for k, v in base.items() if k != "read")
    return base


def planted_rows():
    return [
        *good_records(),
        ("truncated.jpg", "a truncated jpeg"),
        ("garbage.jpg", "not an image"),
        ("missing1.jpg", "no such file"),
        ("missing2.jpg", "no such file either"),
        ("img00.jpg", ""),
        ("img01.jpg", "   "),
    ]


def read_all(reader, workers=0):
    if workers == 0:
        return list(reader)
    loader = DataLoader(reader, batch_size=None, num_workers=workers)
    return list(loader)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("sep,suffix", [(",", ".csv"), ("\t", ".tsv")])
def test_csv_reader_counts_exactly_the_planted_problems(tmp_path, planted, sep, suffix, workers, caplog):
    path = tmp_path / f"pairs{suffix}"
    lines = ["filepath" + sep + "title"] + [f"images/{n}{sep}{c}" for n, c in planted_rows()]
    data = ("\n".join(lines) + "\n").encode()
    data += b"images/img02.jpg" + sep.encode() + b"caf\xe9 latin-1 bytes\n"  # undecodable
    data += b"images/img03.jpg" + sep.encode() + b"ok" + sep.encode() + b"extra field\n"  # malformed row
    data += b"images/img04.jpg\n"  # a short row: malformed too, not an empty caption
    path.write_bytes(data)
    reader = CsvReader(path, image_key="filepath", caption_key="title")
    with caplog.at_level(logging.WARNING, logger="compclip"):
        samples = read_all(reader, workers)
    assert reader.stats() == expected(undecodable_text=1, bad_record=2)
    assert sorted(s["caption"] for s in samples) == sorted(c for _, c in good_records())
    assert all(s["image"].size == (40, 32) for s in samples)
    if workers == 0:  # worker processes log in their own process
        text = caplog.text
        assert f"{path}:13" in text and "truncated.jpg" in text  # file and line of the first bad record
        assert f"{path}:20 (3 fields, header has 2)" in text and f"{path}:21 (1 fields, header has 2)" in text
        assert "read 11 samples, skipped 9" in text


def test_csv_reader_applies_the_transform_and_feeds_a_dataloader(tmp_path, planted):
    from compclip.models import load_model

    _, preprocess, _ = load_model("compclip-tiny-clip")
    path = tmp_path / "pairs.csv"
    path.write_text("image,caption\n" + "".join(f"{n},{c}\n" for n, c in good_records()))
    reader = CsvReader(path, transform=preprocess, image_root=planted)
    batches = list(DataLoader(reader, batch_size=4, num_workers=2))
    assert sum(len(b["caption"]) for b in batches) == GOOD
    assert batches[0]["image"].shape == (4, 3, 64, 64) and batches[0]["image"].dtype == torch.float32


def test_csv_reader_names_missing_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("url,text\na.jpg,a dog\n")
    with pytest.raises(ValueError, match=r"x.csv: no column \['image', 'caption'\]"):
        CsvReader(path)


def write_shards(tmp_path, planted):
    """Two shards: txt and json captions, png and webp images, every kind of bad record."""
    records = []
    for i, (name, caption) in enumerate(planted_rows()):
        file = planted / name
        ext = ["jpg", "png", "webp"][i % 3] if file.exists() and i < GOOD else "jpg"
        data = file.read_bytes() if file.exists() else None
        if ext != "jpg":
            data = image_bytes(i, {"png": "PNG", "webp": "WEBP"}[ext])
        rec = {"__key__": f"{i:04d}"}
        if data is not None:
            rec[ext] = data
        if i % 2:
            rec["json"] = json.dumps({"caption": caption}).encode()
        else:
            rec["txt"] = caption.encode()
        records.append(rec)
    records.append({"__key__": "undecodable", "jpg": image_bytes(50), "txt": b"caf\xe9"})
    records.append({"__key__": "badjson", "jpg": image_bytes(51), "json": b"{not json"})
    paths = []
    for s in range(2):
        path = tmp_path / f"shard-{s:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for rec in records[s::2]:
                for ext, payload in rec.items():
                    if ext == "__key__":
                        continue
                    info = tarfile.TarInfo(f"{rec['__key__']}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        paths.append(path)
    return paths


@pytest.mark.parametrize("workers", [0, 2])
def test_webdataset_reader_counts_exactly_the_planted_problems(tmp_path, planted, workers):
    write_shards(tmp_path, planted)
    reader = open_reader(str(tmp_path / "shard-{000..001}.tar"))
    assert isinstance(reader, WebDatasetReader) and len(reader.urls) == 2
    samples = read_all(reader, workers)
    assert reader.stats() == expected(undecodable_text=1, bad_record=1)
    assert Counter(s["caption"] for s in samples) == Counter(c for _, c in good_records())


def test_webdataset_reader_spreads_one_shard_over_workers(tmp_path, planted):
    shards = write_shards(tmp_path, planted)
    reader = WebDatasetReader(str(shards[0]))
    samples = read_all(reader, workers=2)
    single = list(WebDatasetReader(str(shards[0])))
    assert sorted(s["key"] for s in samples) == sorted(s["key"] for s in single) and len(single) > 2


def test_webdataset_reader_survives_a_truncated_shard(tmp_path, planted):
    """A transfer cut inside a member's data: the records before it are read, the cut is counted."""
    shard = write_shards(tmp_path, planted)[0]
    with tarfile.open(shard) as tar:
        cut = tar.getmembers()[6]  # the image of the fourth record
    shard.write_bytes(shard.read_bytes()[: cut.offset_data + cut.size // 2])
    reader = WebDatasetReader(str(shard))
    samples = list(reader)
    assert [s["caption"] for s in samples] == ["caption number 0", "caption number 2", "caption number 4"]
    assert reader.stats()["bad_record"] == 1 and reader.stats()["read"] == 3
    missing = WebDatasetReader([str(tmp_path / "gone.tar"), str(shard)])
    assert len(list(missing)) == 3 and missing.stats()["bad_record"] == 2


def test_a_shard_cut_inside_its_closing_zero_blocks_is_a_cut_shard(tmp_path, planted, caplog):
    """A tar ends in two zero blocks of 512 bytes after its last member: a shard cut 100 bytes short of that end is cut
    off (one bad record naming where), as one cut in a member is; whole, it reads with no such record."""
    shard = write_shards(tmp_path, planted)[0]
    with tarfile.open(shard) as tar:
        last = tar.getmembers()[-1]
    end = last.offset_data + -(-last.size // 512) * 512 + 2 * 512  # the archive's end, without tarfile's padding after it
    whole = shard.read_bytes()[:end]
    shard.write_bytes(whole)
    reader = WebDatasetReader(str(shard))
    assert len(list(reader)) == 6 and reader.stats()["bad_record"] == 1  # the shard's record of bad json
    shard.write_bytes(whole[:-100])
    reader = WebDatasetReader(str(shard))
    with caplog.at_level(logging.WARNING, logger="compclip"):
        assert len(list(reader)) == 6 and reader.stats()["bad_record"] == 1  # the cut, the bad json's sample lost with it
    assert f"{shard} after key badjson (ReadError: cut off after byte {end - 100}: the archive's end is missing)" in caplog.text


@pytest.mark.parametrize("workers", [0, 2])
def test_folder_reader_coco_format(tmp_path, planted, workers):
    rows = planted_rows()
    names = sorted({n for n, _ in rows})
    coco = {
        "images": [{"id": i, "file_name": n} for i, n in enumerate(names)],
        "annotations": [{"id": j, "image_id": names.index(n), "caption": c} for j, (n, c) in enumerate(rows)]
        + [{"id": 99, "image_id": 12345, "caption": "image id with no image entry"}, {"id": 100, "image_id": 0}],
    }
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(coco))
    reader = open_reader(path, image_root=planted)
    assert isinstance(reader, FolderReader)
    samples = read_all(reader, workers)
    assert reader.stats() == expected(missing_image=3, empty_caption=3)
    assert sorted(s["caption"] for s in samples) == sorted(c for _, c in good_records())


def test_folder_reader_list_and_map_formats(tmp_path, planted):
    listing = [{"image": n, "captions": [c, c + " again"]} for n, c in planted_rows()] + [{"image": 7, "caption": "x"}, "junk"]
    (planted / "list.json").write_text(json.dumps(listing))
    reader = FolderReader(planted / "list.json")
    samples = list(reader)
    # Every record has two captions, so each planted image problem counts twice; the empty
    # captions' "again" twins are read; "junk" has no caption and 7 is no file name.
    assert reader.stats() == expected(read=2 * GOOD + 2, missing_image=2 * 2 + 1, corrupt_image=2 * 2, empty_caption=3)
    assert len(samples) == 2 * GOOD + 2
    mapping = dict(planted_rows()[:GOOD])
    (planted / "map.json").write_text(json.dumps(mapping))
    assert [s["caption"] for s in FolderReader(planted / "map.json")] == [c for _, c in good_records()]


def test_unknown_formats_and_unreadable_json_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown data format"):
        open_reader(tmp_path / "data.parquet")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ValueError, match=r"bad\.json: unreadable captions JSON"):
        FolderReader(tmp_path / "bad.json")


def test_real_flickr8k_csv(tmp_path):
    root = shared_data("flickr8k_1k")
    reader = CsvReader(root / "captions.csv", image_root=root / "images")
    samples = list(reader)
    assert reader.stats()["skipped"] == 0 and len(samples) == 5000
    assert len({s["key"] for s in samples}) == 5000


def test_arrays_joined_by_double_colon_interleave_in_proportion(tmp_path):
    """Two image arrays read as one: every record once, each with its own array's caption and pixels, the
    smaller array spread evenly through the larger (6 and 3 records: a b a a b a a b a), under any worker count."""
    import numpy as np

    from compclip.errors import DataError, UsageError

    paths = []
    for name, n in (("a", 6), ("b", 3)):
        (tmp_path / name).mkdir()
        pixels = np.full((n, 4, 4, 3), ord(name), np.uint8) + np.arange(n, dtype=np.uint8)[:, None, None, None]
        np.save(tmp_path / name / "images.npy", pixels)
        (tmp_path / name / "scenes.jsonl").write_text("".join(json.dumps({"caption": f"{name} {i}"}) + "\n" for i in range(n)))
        paths.append(str(tmp_path / name / "images.npy"))
    joined = "::".join(paths)
    samples = list(open_reader(joined))
    assert [s["caption"] for s in samples] == ["a 0", "b 0", "a 1", "a 2", "b 1", "a 3", "a 4", "b 2", "a 5"]
    for s in samples:
        name, i = s["caption"].split()
        assert (np.asarray(s["image"]) == ord(name) + int(i)).all()
    loader = DataLoader(open_reader(joined), batch_size=None, num_workers=2)
    assert sorted(s["caption"] for s in loader) == sorted(s["caption"] for s in samples)
    with pytest.raises(UsageError, match="several arrays"):
        open_reader(joined, captions=tmp_path / "a" / "scenes.jsonl")
    # a BOM and blank lines (an editor's trailing newline) are no lines, as in the JSONL reader; line i is still image i
    (tmp_path / "b" / "scenes.jsonl").write_text("\ufeff" + "\n\n".join(json.dumps({"caption": f"b {i}"}) for i in range(3)) + "\n\n \n",
                                                encoding="utf-8")
    assert [s["caption"] for s in open_reader(joined)] == [s["caption"] for s in samples]
    (tmp_path / "b" / "scenes.jsonl").write_text('{"caption": "b 0"}\n')
    with pytest.raises(DataError, match=r"1 captions for the 3 images"):
        open_reader(joined)


def test_a_shuffle_buffer_mixes_a_sorted_shard_the_same_way_each_run_and_resumes_exactly(tmp_path):
    """A shard sorted by class (a stream: finite files shuffle whole), read through a buffer of 8: every record once,
    mixed, no record more than 8 places early, the same order for the same seed and epoch, a new one next epoch, and a
    resume position that skips exactly the records already seen in that order."""
    import numpy as np
    from PIL import Image

    n, size = 40, 8
    with tarfile.open(tmp_path / "sorted.tar", "w") as tar:
        for i in range(n):
            png = io.BytesIO()
            Image.new("RGB", (4, 4), (i, i, i)).save(png, "PNG")
            for ext, payload in (("png", png.getvalue()), ("txt", f"class {i // 20} item {i}".encode())):
                info = tarfile.TarInfo(f"{i:04d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))

    def reader(**state):
        r = open_reader(str(tmp_path / "sorted.tar"))
        r.shuffle, r.sample_seed = size, 3
        for k, v in state.items():
            setattr(r, k, v)
        return r

    def order(samples):
        return [int(s["caption"].split()[-1]) for s in samples]

    r = reader()
    first, second = order(r), order(r)  # the reader moves itself to the next epoch
    assert sorted(first) == sorted(second) == list(range(n))
    assert first != list(range(n)) and first != second
    assert all(pos >= i - size for pos, i in enumerate(first))  # a record leaves the buffer only after it entered
    assert any(i >= 20 for i in first[:20])  # the second class reaches the first half
    assert order(reader()) == first and order(reader(epoch=1)) == second
    resumed = list(reader(resume_positions={0: 13}))
    assert order(resumed) == first[13:] and [s["pos"] for s in resumed] == list(range(13, n))
    assert all((np.asarray(s["image"]) == int(s["caption"].split()[-1])).all() for s in resumed)
    loader = DataLoader(reader(), batch_size=None, num_workers=2)
    assert sorted(order(loader)) == list(range(n))


def test_a_shuffle_buffers_last_records_leave_in_an_order_the_seed_draws():
    """When the input ends, the records still in the buffer leave shuffled too: their order, like the first ones',
    depends on the seed (a buffer emptied in place would hand every seed the same tail)."""
    from compclip.data.readers import shuffled

    n, size = 30, 8
    runs = {seed: list(shuffled(iter(range(n)), size, random.Random(seed))) for seed in range(6)}
    for order in runs.values():
        assert sorted(order) == list(range(n))
    tails = {tuple(order[-size:]) for order in runs.values()}
    assert len(tails) == len(runs)  # six seeds, six orders of the last eight
    assert all(list(tail) != sorted(tail) for tail in tails)
    few = {tuple(shuffled(iter(range(5)), size, random.Random(seed))) for seed in range(6)}  # all of them still in the buffer
    assert len(few) > 1 and tuple(range(5)) not in few


def test_every_pil_mode_decodes_as_a_viewer_shows_it(tmp_path):
    """16-bit greys scale to 0-255 (PIL's own conversion clips them: a 16-bit PNG turned white), float greys in [0, 1] scale
    by 255, transparency is composited over white, CMYK converts; in training (a CSV's reader) and evaluation
    (`ImageRef.decode`) alike. Expected pixels computed here with numpy from the arrays written."""
    import numpy as np
    from PIL import Image

    from compclip.data import decode_image
    from compclip.data.images import image_ref

    ramp = (np.arange(32 * 48).reshape(32, 48) * 42).astype(np.uint16)  # 0 .. 64,470
    Image.fromarray(ramp).save(tmp_path / "grey16.png")
    floats = np.linspace(0, 1, 32 * 48, dtype=np.float32).reshape(32, 48)
    Image.fromarray(floats).save(tmp_path / "float.tiff")
    palette = Image.new("P", (8, 8))
    palette.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    palette.paste(1, (4, 0, 8, 8))  # left half index 0 (transparent red), right half index 1 (blue)
    palette.save(tmp_path / "palette.png", transparency=0)
    Image.new("LA", (8, 8), (100, 128)).save(tmp_path / "grey_alpha.png")
    Image.new("CMYK", (8, 8), (0, 255, 255, 0)).save(tmp_path / "cmyk.jpg")
    Image.new("RGBA", (8, 8), (10, 200, 30, 255)).save(tmp_path / "opaque.png")
    assert Image.open(tmp_path / "grey16.png").mode == "I;16" and Image.open(tmp_path / "float.tiff").mode == "F"

    expected = {
        "grey16.png": np.repeat(np.round(ramp / 257)[..., None], 3, axis=2),
        "float.tiff": np.repeat(np.round(floats.astype(np.float64) * 255)[..., None], 3, axis=2),
        "palette.png": np.concatenate([np.full((8, 4, 3), 255), np.tile([0, 0, 255], (8, 4, 1))], axis=1),
        "grey_alpha.png": np.full((8, 8, 3), (100 * 128 + 255 * 127) / 255),
        "cmyk.jpg": np.tile([255, 0, 0], (8, 8, 1)),
        "opaque.png": np.tile([10, 200, 30], (8, 8, 1)),
    }
    for name, want in expected.items():
        for got in (decode_image(tmp_path / name), image_ref(tmp_path / name).decode()):
            assert got.mode == "RGB" and np.abs(np.asarray(got, dtype=np.float64) - want).max() <= 1, name
    (tmp_path / "train.csv").write_text("image,caption\ngrey16.png,a ramp\n")
    sample = next(iter(CsvReader(tmp_path / "train.csv")))
    assert np.abs(np.asarray(sample["image"], dtype=np.float64) - expected["grey16.png"]).max() <= 1  # not a white image


def test_a_file_of_five_captions_a_photo_in_a_row_puts_siblings_into_a_batch_at_chance(tmp_path):
    """1,000 photos of 5 captions each, a photo's captions in a row (Karpathy's CSV, most users' own), batches of 256:
    a uniform shuffle of the N = 5,000 records puts C(256, 2) · 4 / (N - 1) = 26.1 same-photo pairs (false negatives)
    into a batch on average, and the file shuffled whole averages within 20 % of it over the epoch's 19 batches (27.1
    at seed 0); the 1,000-record buffer that read it in file order before averaged 70.2."""
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (4, 4), (90, 120, 150)).save(png, "PNG")
    (tmp_path / "photo.png").write_bytes(png.getvalue())  # one file for all: the order is what is counted
    path = tmp_path / "captions.csv"
    path.write_text("image,caption\n" + "".join(f"photo.png,photo {i} caption {j}\n" for i in range(1000) for j in range(5)))
    reader = open_reader(path, sample_seed=0, shuffle=1000)
    batches = DataLoader(reader, batch_size=256, drop_last=True, collate_fn=lambda b: [s["caption"].split()[1] for s in b])
    pairs = [sum(math.comb(n, 2) for n in Counter(photos).values()) for photos in batches]
    uniform = math.comb(256, 2) * 4 / 4999
    assert len(pairs) == 5000 // 256
    assert abs(sum(pairs) / len(pairs) - uniform) < 0.2 * uniform, (sum(pairs) / len(pairs), uniform)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_row_read_at_random_is_the_row_read_in_order_and_costs_16_bytes_a_row(tmp_path, planted, suffix):
    """A table is shuffled whole by seeking to where each row starts: every row read so, at random, is the row reading
    in order gives, with its line number, through a BOM, CRLF and lone-CR line ends, blank lines, a quoted caption over
    two lines, characters of two bytes, bytes that are not UTF-8 and malformed rows; a shuffled epoch reads and skips
    what an epoch in order does. What the reader keeps of a file of 20,000 rows is where each starts, 16 bytes a row
    (under 24 counted), where holding the rows took hundreds."""
    import tracemalloc

    good = [f"images/{name}" for name, _ in good_records()]
    if suffix == ".csv":
        lines = [b"image,caption\r\n", b'images/img00.jpg,"two\r\nlines"\n', b"\n", b"images/img01.jpg,lone cr\r",
                 b"images/img02.jpg,caf\xe9\n", "images/img05.jpg,un café crème\n".encode(), b'images/img03.jpg,"bad"quote\n',
                 b"images/img04.jpg,ok,extra\n",
                 *(f"{name},caption {i}\n".encode() for i, name in enumerate(good))]
        many = "image,caption\n" + "".join(f"images/img{i % GOOD:02d}.jpg,a caption of row {i}\n" for i in range(20_000))
    else:
        lines = [b'{"image": "images/img00.jpg", "caption": "crlf"}\r\n', b"\n", b'{"image": "images/img01.jpg", "caption": "cr"}\r',
                 b'{"image": "images/img02.jpg", "caption": "caf\xe9"}\n',
                 '{"image": "images/img05.jpg", "caption": "un café crème"}\n'.encode(), b"not json\n", b"[1, 2]\n",
                 *(json.dumps({"image": name, "caption": f"caption {i}"}).encode() + b"\n" for i, name in enumerate(good))]
        many = "".join(json.dumps({"image": f"images/img{i % GOOD:02d}.jpg", "caption": f"a caption of row {i}"}) + "\n"
                       for i in range(20_000))
    path = tmp_path / f"table{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))
    reader = open_reader(path)
    in_order = list(reader._rows_of())
    assert len(in_order) == reader.num_records() > GOOD
    assert [reader.record_at(k) for k in reversed(range(len(in_order)))] == [(*row[:3], None) for row in reversed(in_order)]
    epochs = {}
    for shuffle in (0, 1000):
        shuffled_or_not = open_reader(path, shuffle=shuffle, sample_seed=1)
        epochs[shuffle] = sorted((s["key"], s["caption"]) for s in shuffled_or_not), shuffled_or_not.stats()
    assert epochs[0] == epochs[1000] and epochs[0][1]["bad_record"] == 2 and epochs[0][1]["undecodable_text"] == 1

    (tmp_path / f"many{suffix}").write_text(many)
    tracemalloc.start()
    try:
        reader = open_reader(tmp_path / f"many{suffix}")
        before = tracemalloc.get_traced_memory()[0]
        assert reader.record_at(19_999)[2] == "a caption of row 19999"
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 24 * 20_000, kept
