"""NegCLIP's hard-negative images (`--method negclip --method-opt hard_images=...`): the batch against the released
trainer's (github.com/vinid/neg_clip, src/training/train.py's `train_one_epoch` with open_clip's `ClipLoss`) written out
another way, the records' nearest neighbours (`neighbours`, NegCLIP's `neg_image` column) drawn by the real reader, and
the binding world's negative images through `compclip train`. Two processes against one: tests/test_library.py's plain
loop (`negclip_images`)."""
import json
import logging
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.data import open_reader
from compclip.data.readers import image_files
from compclip.errors import DataError
from compclip.methods import build_method
from conftest import assert_same_terms, run_main


def released_batch_loss(images, hard_images, captions, hard_captions, swaps, hard_swaps, scale):
    """train.py's batch, one row at a time: images [X; X̃], texts [Y; Ỹ; Y'; Ỹ']; ClipLoss's mean over the 2B images of
    −log softmax of its row of every text at its own caption, and over the 2B captions (`logits_per_text[:2B]`) of
    −log softmax of its row of every image at its own image, halved."""
    x, texts = torch.cat([images, hard_images]), torch.cat([captions, hard_captions, swaps, hard_swaps])
    n, i2t, t2i = x.shape[0], 0.0, 0.0
    for i in range(n):
        row = scale * texts @ x[i]
        i2t = i2t + torch.logsumexp(row, 0) - row[i]
        column = scale * x @ texts[i]
        t2i = t2i + torch.logsumexp(column, 0) - column[i]
    return (i2t / n + t2i / n) / 2


def test_negclip_with_hard_images_is_the_released_batch_with_its_gradients():
    """Five samples, each with its hard image and caption; four swaps of the captions and three of the hard captions (a
    caption may have none): the value and every input's gradient."""
    g = torch.Generator().manual_seed(0)
    shapes = {"image_features": 5, "hard_image_features": 5, "text_features": 5, "hard_text_features": 5, "swaps": 4, "hard_swaps": 3}
    leaves = {k: torch.randn(n, 8, generator=g, dtype=torch.float64).requires_grad_() for k, n in shapes.items()}
    twins = {k: x.detach().clone().requires_grad_() for k, x in leaves.items()}
    scale = torch.tensor(12.0, dtype=torch.float64)
    method = build_method("negclip", hard_images="negative_image")
    out = {k: F.normalize(x, dim=-1) for k, x in leaves.items() if k.endswith("features")}
    out["negative_features"] = F.normalize(torch.cat([leaves["swaps"], leaves["hard_swaps"]]), dim=-1)
    terms = method({**out, "logit_scale": scale})
    t = {k: F.normalize(x, dim=-1) for k, x in twins.items()}
    expected = {"negclip": released_batch_loss(t["image_features"], t["hard_image_features"], t["text_features"],
                                               t["hard_text_features"], t["swaps"], t["hard_swaps"], scale)}
    assert_same_terms(terms, expected, list(leaves.values()), list(twins.values()))


def test_the_batch_holds_the_hard_images_their_captions_and_both_swaps():
    """The collate stacks each sample's hard image, tokenizes its caption, and makes the swaps of the captions and of
    the hard captions from their concept records, as the released CsvDataset gives `new_images`, `new_texts`, `new_hard`."""
    from open_clip import tokenize

    from compclip.concepts import extract
    from compclip.methods.negclip import swap_negatives

    captions, hard = ["a red cup on a blue table", "a dog near a cat"], ["a blue cup on a red table", "a small dog under a big tree"]
    records = {r["caption"]: r for r in extract(captions + hard, "noun-phrases,pos")}
    method = build_method("negclip", concepts=records, hard_images="negative_image")
    images = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    batch = method.collate([{"image": images[i], "caption": captions[i], "negative_image": images[2 + i], "negative_caption": hard[i]}
                            for i in range(2)], tokenize)
    assert torch.equal(batch["hard_image"], images[2:]) and torch.equal(batch["hard_text"], tokenize(hard))
    swaps, hard_swaps = ([s for c in texts for s in swap_negatives(c, records[c])] for texts in (captions, hard))
    assert swaps and hard_swaps
    assert torch.equal(batch["negative_text"], tokenize(swaps + hard_swaps))


def test_hard_images_need_negclips_batch_form():
    with pytest.raises(ValueError, match=re.escape("hard_images=neighbours puts more samples in the batch, whose swaps are "
                                                   "columns of every image's row (NegCLIP's released batch): it needs "
                                                   "negatives_in=batch, not row")):
        build_method("negclip", hard_images="neighbours", negatives_in="row")


def write_data(root, neighbours, images=4):
    """JSON lines of `images` records, record i's image a colour of its own, its `neg_image` the lists given."""
    (root / "img").mkdir(parents=True, exist_ok=True)
    for i in range(images):
        Image.new("RGB", (8, 8), (50 * i, 30, 200 - 40 * i)).save(root / "img" / f"{i}.png")
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"image": f"img/{i}.png", "caption": f"caption {i}", "neg_image": n}) + "\n"
                            for i, n in enumerate(neighbours)))
    return data


def pixels(sample_image):
    return np.asarray(sample_image)


def test_a_neighbour_is_drawn_from_the_records_list_and_gives_its_image_and_caption(tmp_path):
    """Each sample's hard image and caption are those of one record its list names (the released
    `random.choice(self.hard_images[idx])`), the same in a second reading of the epoch, and over epochs each listed
    neighbour is drawn."""
    data = write_data(tmp_path, [[1, 2], [0], [3, 1], [0, 1, 2]])
    own = {f"caption {i}": np.asarray(Image.open(tmp_path / "img" / f"{i}.png")) for i in range(4)}
    reader = open_reader(data, sample_seed=0, fields={"neighbours": "neg_image"})
    drawn = {}
    for epoch in range(12):
        reader.start(epoch)
        first = list(reader)
        reader.start(epoch)
        assert [s["negative_caption"] for s in list(reader)] == [s["negative_caption"] for s in first]
        for sample in first:
            assert np.array_equal(pixels(sample["negative_image"]), own[sample["negative_caption"]])
            drawn.setdefault(sample["caption"], set()).add(sample["negative_caption"])
    assert drawn == {"caption 0": {"caption 1", "caption 2"}, "caption 1": {"caption 0"}, "caption 2": {"caption 3", "caption 1"},
                     "caption 3": {"caption 0", "caption 1", "caption 2"}}


def test_a_neighbour_without_its_image_skips_the_sample_counted_and_a_bad_list_is_a_bad_record(tmp_path, caplog):
    """Record 3's image is gone: a sample whose neighbour it is is skipped under missing_image, named by its own record
    and the neighbour's; a value that is no list of indices is a bad record."""
    data = write_data(tmp_path, [[3], [0], "two", [0]])
    (tmp_path / "img" / "3.png").unlink()
    with caplog.at_level(logging.WARNING, logger="compclip.data"):
        reader = open_reader(data, sample_seed=0, fields={"neighbours": "neg_image"})
        samples = list(reader)
    assert [s["caption"] for s in samples] == ["caption 1"]
    stats = reader.stats()
    assert (stats["missing_image"], stats["bad_record"]) == (2, 1), stats
    assert f"{data}:1 (field 'neg_image': {data}:4: {tmp_path / 'img' / '3.png'})" in caplog.text
    assert f"{data}:3 (field 'neg_image': 'two' is not a list of record indices)" in caplog.text


def test_a_neighbour_index_outside_the_data_is_one_error_naming_the_file_the_record_and_both_numbers(tmp_path):
    data = write_data(tmp_path, [[1], [4], [0], [1]])
    reader = open_reader(data, sample_seed=0, fields={"neighbours": "neg_image"})
    with pytest.raises(DataError, match=rf"{data}:2: field 'neg_image' holds record index 4, and {data} has 4 records \(indices "
                                        r"0 to 3\): its neighbours were computed for other data"):
        list(reader)


def test_the_resume_hash_and_the_missing_image_check_see_the_negative_images(tmp_path):
    """A JSON lines file's negative images (TripletCLIP's field, a path) are hashed with its images, so a negative image
    replaced under its name changes what a resume compares; the first missing image named is a missing negative image."""
    (tmp_path / "img").mkdir()
    for name in ("0", "1", "n0", "n1"):
        Image.new("RGB", (8, 8), (len(name) * 60, 10, 10)).save(tmp_path / "img" / f"{name}.png")
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"image": f"img/{i}.png", "caption": f"c {i}", "negative_image": f"img/n{i}.png",
                                        "negative_caption": f"n {i}"}) + "\n" for i in range(2)))
    fields = {"negative_image": "negative_image", "negative_caption": "negative_caption"}
    before = image_files(open_reader(data, fields=fields))
    Image.new("RGB", (8, 8), (0, 200, 0)).save(tmp_path / "img" / "n1.png")
    assert image_files(open_reader(data, fields=fields))["images_sha256"] != before["images_sha256"]
    (tmp_path / "img" / "n1.png").unlink()
    assert open_reader(data, fields=fields).first_missing_image() == (f"{data}:2", tmp_path / "img" / "n1.png")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from compclip.concepts import build_store
    from compclip.world import WorldConfig, generate

    root = tmp_path_factory.mktemp("world")
    cfg = WorldConfig(seed=5, n_train=16, n_val=4, n_test=4, size=32, min_objects=2, max_objects=3)
    world = generate(root / "w", cfg, workers=1)
    records = [json.loads(line) for line in (world / "train" / "scenes.jsonl").read_text().splitlines()]
    build_store([r[k] for r in records for k in ("caption", "negative_caption") if r[k]], root / "store", ("noun_phrases", "pos"))
    return world, root / "store"


def test_negclip_trains_on_the_worlds_negative_images_through_compclip_train(world, tmp_path, capsys):
    """The world's negative_image.npy rows and captions as each sample's hard image and caption, their swaps from the
    store (which the demo builds from both captions), one step."""
    root, store = world
    code, _, err = run_main(capsys, "-q", "train", "--method", "negclip", "--method-opt", "hard_images=negative_image",
                            "--model", "compclip-tiny-siglip", "--train-data", root / "train" / "images.npy", "--concepts", store,
                            "--steps", "1", "--batch-size", "4", "--workers", "0", "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    assert "Negclip: " in (tmp_path / "run" / "train.log").read_text()


def test_negclip_trains_on_neighbours_in_an_arrays_scenes_through_compclip_train(world, tmp_path, capsys):
    """An image array whose scenes.jsonl lists each scene's neighbours (the next two scenes): the neighbour's row is
    viewed by the batched training view as the scene's is, one step."""
    root, store = world
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "images.npy").write_bytes((root / "train" / "images.npy").read_bytes())
    records = [json.loads(line) for line in (root / "train" / "scenes.jsonl").read_text().splitlines()]
    (tmp_path / "data" / "scenes.jsonl").write_text("".join(
        json.dumps({"caption": r["caption"], "nn": [(i + 1) % len(records), (i + 2) % len(records)]}) + "\n"
        for i, r in enumerate(records)))
    code, _, err = run_main(capsys, "-q", "train", "--method", "negclip", "--method-opt", "hard_images=neighbours", "--field-key",
                            "neighbours=nn", "--model", "compclip-tiny-siglip", "--train-data", tmp_path / "data" / "images.npy",
                            "--concepts", store, "--steps", "1", "--batch-size", "4", "--workers", "0", "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    assert "Negclip: " in (tmp_path / "run" / "train.log").read_text()


def test_compclip_neighbours_writes_each_records_nearest_images_and_negclip_trains_on_them(tmp_path, capsys):
    """Seven records of seeded noise images: each record's two neighbours are the two others of highest cosine similarity
    of the model's embeddings (here ranked by a full sort); a line that is no JSON is kept as it was, and a record whose
    image is gone lists none and is no one's neighbour; the file written trains negclip on its neighbours."""
    from compclip.models import load_model

    (tmp_path / "img").mkdir()
    rng = np.random.default_rng(0)
    for i in range(7):
        Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
    lines = [json.dumps({"image": f"img/{i}.png", "caption": f"a photo number {i}"}) for i in range(7)]
    lines.insert(3, "{not json")
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "img" / "5.png").unlink()  # record 6 (the line after the broken one counts)
    code, out, err = run_main(capsys, "neighbours", tmp_path / "data.jsonl", "--model", "compclip-tiny-siglip", "--k", "2", "--out",
                              tmp_path / "nn.jsonl")
    assert code == 0, err
    assert "8 records, 2 neighbours each; 2 without a readable image list none" in out
    written = (tmp_path / "nn.jsonl").read_text().splitlines()
    assert written[3] == "{not json"
    model, preprocess, _ = load_model("compclip-tiny-siglip")
    readable = [i for i in range(8) if i not in (3, 6)]
    with torch.no_grad():
        x = F.normalize(model.encode_image(torch.stack([preprocess(Image.open(tmp_path / "img" / f"{n}.png").convert("RGB"))
                                                        for n in range(7) if n != 5])), dim=-1).numpy()
    sims = x @ x.T
    for row, i in enumerate(readable):
        order = [readable[j] for j in np.argsort(-sims[row], kind="stable") if j != row]
        assert json.loads(written[i])["neighbours"] == order[:2], (i, sims[row])
    assert json.loads(written[6])["neighbours"] == []
    code, _, err = run_main(capsys, "-q", "train", "--method", "negclip", "--method-opt", "hard_images=neighbours", "--model",
                            "compclip-tiny-siglip", "--train-data", tmp_path / "nn.jsonl", "--steps", "1", "--batch-size", "2",
                            "--workers", "0", "--out", tmp_path / "run", "--concepts", store_of(tmp_path, lines))
    assert code == 0, err[-3000:]


def store_of(root, lines):
    from compclip.concepts import build_store

    captions = [json.loads(line)["caption"] for line in lines if line.startswith('{"')]
    build_store(captions, root / "store", ("noun_phrases", "pos"))
    return root / "store"


def test_compclip_neighbours_never_gives_a_record_its_own_photo_under_its_path_a_link_or_a_copy(tmp_path, capsys):
    """A caption file as COCO and Flickr give one, several captions a photo: four noise photos of three captions each,
    and photo 0 again as a link and as a copy under other names (one caption each). Each record's three neighbours show
    other photos (told by their bytes), and are the three records of other photos of highest cosine similarity of the
    model's embeddings: their similarities the top three of those records' (ties among one photo's captions in any
    order)."""
    from compclip.models import load_model

    (tmp_path / "img").mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(tmp_path / "img" / f"{i}.png")
    (tmp_path / "img" / "copy-of-0.png").write_bytes((tmp_path / "img" / "0.png").read_bytes())
    (tmp_path / "img" / "link-to-0.png").symlink_to("0.png")
    names = [f"{i}.png" for i in range(4) for _ in range(3)] + ["copy-of-0.png", "link-to-0.png"]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"image": f"img/{name}", "caption": f"caption {n} of {name}"}) + "\n"
                                                 for n, name in enumerate(names)))
    code, out, err = run_main(capsys, "neighbours", tmp_path / "data.jsonl", "--model", "compclip-tiny-siglip", "--k", "3", "--out",
                              tmp_path / "nn.jsonl")
    assert code == 0, err
    assert "14 records, 3 neighbours each" in out
    found = [json.loads(line)["neighbours"] for line in (tmp_path / "nn.jsonl").read_text().splitlines()]
    photo = [(tmp_path / "img" / name).read_bytes() for name in names]
    model, preprocess, _ = load_model("compclip-tiny-siglip")
    with torch.no_grad():
        x = F.normalize(model.encode_image(torch.stack([preprocess(Image.open(tmp_path / "img" / name).convert("RGB"))
                                                        for name in names])), dim=-1).numpy()
    sims = x @ x.T
    for i, near in enumerate(found):
        assert len(near) == 3 and all(photo[j] != photo[i] for j in near), (names[i], [names[j] for j in near])
        others = sorted((sims[i, j] for j in range(len(names)) if photo[j] != photo[i]), reverse=True)
        assert [sims[i, j] for j in near] == pytest.approx(others[:3], abs=1e-5), names[i]


def test_nearest_neighbours_leaves_out_a_rows_own_image_in_every_chunk_of_rows():
    """Thirty rows, six images of five rows each spread through them (row r shows image r % 6), the similarity matrix
    held four rows at a time: past the first chunk too, no row's neighbour is a row of its own image, and each row's
    neighbours are, most similar first, the rows of other images ranked by a full sort of its cosine similarities. More
    neighbours than the 25 rows of other images a row has are refused."""
    from compclip.errors import UsageError
    from compclip.neighbours import nearest_neighbours

    images = [r % 6 for r in range(30)]
    centres = torch.randn(6, 16, generator=torch.Generator().manual_seed(2))
    features = centres[images] + 0.3 * torch.randn(30, 16, generator=torch.Generator().manual_seed(3))
    found = nearest_neighbours(features, k=4, images=images, chunk=4).tolist()
    unit = features / features.norm(dim=1, keepdim=True)
    for row, near in enumerate(found):
        ranked = sorted((j for j in range(30) if images[j] != images[row]), key=lambda j: -float(unit[row] @ unit[j]))
        assert near == ranked[:4], (row, near)
    with pytest.raises(UsageError, match=re.escape("--k must be 1 to 25 (the fewest records of other images than a record's own), "
                                                   "not 26")):
        nearest_neighbours(features, k=26, images=images, chunk=4)


def test_a_neighbour_index_outside_the_data_is_refused_before_step_one_writing_nothing(tmp_path, capsys):
    """The last of eight records lists record 99 (a neighbours file of other data): `compclip train` reads in order two a
    step, and would draw it at step 4, three checkpoints written; it is one error line naming the file, the record and
    both numbers before step 1, and no run folder is left."""
    data = write_data(tmp_path, [[1], [0], [3], [2], [5], [4], [7], [99]], images=8)
    store = store_of(tmp_path, data.read_text().splitlines())
    code, _, err = run_main(capsys, "-q", "train", "--method", "negclip", "--method-opt", "hard_images=neighbours", "--field-key",
                            "neighbours=neg_image", "--model", "compclip-tiny-siglip", "--train-data", data, "--concepts", store,
                            "--steps", "4", "--batch-size", "2", "--shuffle", "0", "--save-every", "1", "--workers", "0",
                            "--out", tmp_path / "run")
    said = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and said == [f"error: {data}:8: field 'neg_image' holds record index 99, and {data} has 8 records (indices 0 "
                                  "to 7): its neighbours were computed for other data"], err[-3000:]
    assert not (tmp_path / "run").exists()
