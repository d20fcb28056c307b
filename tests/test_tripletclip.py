"""TripletCLIP (`--method tripletclip`): its loss against the released `tripletclip_loss` (src/openclip/src/loss.py of
tripletclip/TripletCLIP) written out another way, its data fields (`negative_image`, `negative_caption`) through the real
readers and `compclip train`, and the binding world's negatives (two objects' colours exchanged)."""
import io
import json
import logging
import tarfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.data import open_reader
from compclip.methods import TripletCLIPLoss
from compclip.world import COLORS, Scene, WorldConfig, generate
from conftest import assert_same_terms, run_main

FIELDS = {"negative_image": "negative_image", "negative_caption": "negative_caption"}


def released_formula(image, text, negative_image, negative_text, scale, columns=True):
    """`tripletclip_loss` as loss.py computes it, one row at a time: negclip(x, y, y') is the mean over images of
    −log softmax of its row (every caption, then every y' when `columns`) at its caption, and over captions of −log
    softmax of its row of images at its image, halved; the real pair's plus the negative pair's (y as its y')."""

    def negclip(x, y, other):
        n, i2t, t2i = x.shape[0], [], []
        for i in range(n):
            row = torch.cat([scale * y @ x[i], *([scale * other @ x[i]] if columns else [])])
            i2t.append(torch.logsumexp(row, 0) - row[i])
            column = scale * x @ y[i]
            t2i.append(torch.logsumexp(column, 0) - column[i])
        return (torch.stack(i2t).sum() / n + torch.stack(t2i).sum() / n) / 2

    return {"tripletclip": negclip(image, text, negative_text), "tripletclip_negative": negclip(negative_image, negative_text, text)}


@pytest.mark.parametrize("columns", [True, False])
def test_tripletclip_loss_is_the_released_formula_with_its_gradients(columns):
    """Six samples: both terms and every input's gradient, with the other half's captions as columns (the released
    negclip_loss) and without (negative_columns=False)."""
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(6, 8, generator=g, dtype=torch.float64).requires_grad_() for _ in range(4)]
    twins = [x.detach().clone().requires_grad_() for x in leaves]
    scale = torch.tensor(12.0, dtype=torch.float64)
    terms = TripletCLIPLoss(negative_columns=columns)(*(F.normalize(x, dim=-1) for x in leaves), scale)
    expected = released_formula(*(F.normalize(x, dim=-1) for x in twins), scale, columns)
    assert_same_terms(terms, expected, leaves, twins)


def write_images(root, n):
    (root / "img").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (16, 16), (40 * i, 80, 120)).save(root / "img" / f"{i}.png")
        Image.new("RGB", (16, 16), (120, 80, 40 * i)).save(root / "img" / f"neg{i}.png")


def test_negative_images_and_captions_are_read_from_json_lines_and_a_bad_one_is_skipped_and_counted(tmp_path, caplog):
    """A record's negative image is a path found as its image's is, decoded and viewed with the same transform; one
    missing, one corrupt and a negative caption absent are each skipped, counted and named by file and line."""
    write_images(tmp_path, 4)
    (tmp_path / "img" / "bad.png").write_bytes(b"no image")
    negatives = ["img/neg0.png", "img/gone.png", "img/bad.png", "img/neg3.png"]
    lines = [{"image": f"img/{i}.png", "caption": f"caption {i}", "neg": n, "negative_caption": f"negative {i}"}
             for i, n in enumerate(negatives)]
    del lines[3]["negative_caption"]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level(logging.WARNING, logger="compclip.data"):
        reader = open_reader(data, transform=lambda im: torch.from_numpy(np.asarray(im).copy()),
                             fields={"negative_image": "neg", "negative_caption": "negative_caption"})
        samples = list(reader)
    assert len(samples) == 1 and samples[0]["negative_caption"] == "negative 0"
    assert torch.equal(samples[0]["negative_image"], torch.from_numpy(np.array(Image.open(tmp_path / "img" / "neg0.png"))))
    stats = reader.stats()
    assert (stats["missing_image"], stats["corrupt_image"], stats["bad_record"]) == (1, 1, 1)
    assert f"{data}:2 (field 'neg': {tmp_path / 'img' / 'gone.png'})" in caplog.text
    assert f"{data}:3 (field 'neg': {tmp_path / 'img' / 'bad.png'}: UnidentifiedImageError" in caplog.text
    assert f"{data}:4 (field 'negative_caption': absent)" in caplog.text


def test_negative_images_are_read_from_shards_as_the_released_data_names_its_members(tmp_path, caplog):
    """The released TripletCLIP-High-Quality layout (src/openclip/src/data.py): KEY.image, KEY.caption, KEY.neg_image,
    KEY.neg_caption; a negative image that does not decode is skipped and counted, named by shard and key."""
    write_images(tmp_path, 3)
    shard = tmp_path / "shard-0.tar"
    with tarfile.open(shard, "w") as tar:
        for i in range(3):
            negative = b"broken" if i == 1 else (tmp_path / "img" / f"neg{i}.png").read_bytes()
            for ext, payload in (("image", (tmp_path / "img" / f"{i}.png").read_bytes()), ("caption", f"caption {i}".encode()),
                                 ("neg_image", negative), ("neg_caption", f"negative {i}".encode())):
                info = tarfile.TarInfo(f"{i:05d}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    with caplog.at_level(logging.WARNING, logger="compclip.data"):
        reader = open_reader(shard, fields={"negative_image": "neg_image", "negative_caption": "neg_caption"})
        samples = list(reader)
    assert [(s["caption"], s["negative_caption"]) for s in samples] == [("caption 0", "negative 0"), ("caption 2", "negative 2")]
    assert np.array_equal(np.asarray(samples[1]["negative_image"]), np.asarray(Image.open(tmp_path / "img" / "neg2.png")))
    assert np.array_equal(np.asarray(samples[1]["image"]), np.asarray(Image.open(tmp_path / "img" / "2.png")))
    assert reader.stats()["corrupt_image"] == 1 and f"{shard} key 00001 (field 'neg_image': UnidentifiedImageError" in caplog.text


def test_compclip_train_refuses_tripletclip_on_a_csv(tmp_path, capsys):
    """A CSV holds one image and caption a row: one error line naming the field, the file and what to write instead."""
    write_images(tmp_path, 2)
    data = tmp_path / "t.csv"
    data.write_text("image,caption\nimg/0.png,a cup\nimg/1.png,a red cup\n")
    code, _, err = run_main(capsys, "train", "--method", "tripletclip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--steps", "1", "--out", tmp_path / "run")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1, err
    assert f"{data}: the method reads a field 'negative_image' per sample (an image)" in lines[0]
    assert "JSON lines with a 'negative_image' image path in each record" in lines[0] and ".negative_image image member" in lines[0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    cfg = WorldConfig(seed=5, n_train=48, n_val=4, n_test=4, size=32, min_objects=1, max_objects=3)
    return generate(tmp_path_factory.mktemp("world") / "w", cfg, workers=1), cfg


def test_the_worlds_negatives_exchange_two_objects_colours_in_pixels_and_caption(world):
    """Each training scene's negative: the same objects with two colours exchanged (one recoloured where none can be),
    every pairing still a seen one; its image differs from the scene's only inside those objects, in their new colours;
    its caption is the scene's with the colours exchanged."""
    root, cfg = world
    held = {tuple(p) for p in json.loads((root / "manifest.json").read_text())["heldout"]}
    images, negatives = np.load(root / "train" / "images.npy"), np.load(root / "train" / "negative_image.npy")
    records = [json.loads(line) for line in (root / "train" / "scenes.jsonl").read_text().splitlines()]
    swapped = 0
    for record in records:
        scene, negative = Scene.from_dict(record["scene"]), Scene.from_dict(record["negative_scene"])
        changed = [(a, b) for a, b in zip(scene.objects, negative.objects, strict=True) if a != b]
        assert all((a.shape, a.size, a.x, a.y) == (b.shape, b.size, b.x, b.y) for a, b in changed)
        assert not {(o.color, o.shape) for o in negative.objects} & held and record["negative_image"] == record["index"]
        if len(changed) == 2:
            (a1, b1), (a2, b2) = changed
            assert (b1.color, b2.color) == (a2.color, a1.color)
            swapped += 1
        else:  # recoloured: no two of its objects could exchange theirs
            assert len(changed) == 1
        differs = (images[record["index"]] != negatives[record["index"]]).any(-1)
        ys, xs = np.nonzero(differs)
        for y, x in zip(ys, xs, strict=True):  # every changed pixel lies in a changed object and takes its new colour
            owner = min(changed, key=lambda ab: (ab[0].x * cfg.size - x - 0.5) ** 2 + (ab[0].y * cfg.size - y - 0.5) ** 2)
            reach = owner[0].radius * cfg.size + 1  # its bounding box, a pixel's edge either side
            assert abs(owner[0].x * cfg.size - x - 0.5) <= reach and abs(owner[0].y * cfg.size - y - 0.5) <= reach
            assert tuple(negatives[record["index"]][y, x]) == COLORS[owner[1].color]
        for before, after in changed:  # the centre of each changed object
            at = int(after.y * cfg.size), int(after.x * cfg.size)
            assert tuple(images[record["index"]][at]) == COLORS[before.color]
            assert tuple(negatives[record["index"]][at]) == COLORS[after.color]
        expected = record["caption"]
        for before, after in changed:
            expected = expected.replace(f"{before.size} {before.color} {before.shape}", f"\0{id(after)}\0")
        for _, after in changed:
            expected = expected.replace(f"\0{id(after)}\0", f"{after.size} {after.color} {after.shape}")
        assert record["negative_caption"] == expected != record["caption"]
    assert swapped > len(records) // 3  # a third of the scenes hold one object
    reader = open_reader(root / "train" / "images.npy", fields=FIELDS)  # each sample's own row of negative_image.npy
    for sample, record in zip(reader, records, strict=True):
        assert np.array_equal(np.asarray(sample["negative_image"]), negatives[record["index"]])
        assert sample["negative_caption"] == record["negative_caption"]


def test_tripletclip_trains_on_the_worlds_array_through_compclip_train(world, tmp_path, capsys):
    """The world's negative_image.npy read beside its images.npy, both viewed by the batched training view, one step."""
    root, _ = world
    code, _, err = run_main(capsys, "-q", "train", "--method", "tripletclip", "--model", "compclip-tiny-siglip", "--train-data",
                            root / "train" / "images.npy", "--steps", "1", "--batch-size", "4", "--workers", "0", "--out",
                            tmp_path / "run")
    assert code == 0, err[-3000:]
    said = (tmp_path / "run" / "train.log").read_text()
    assert "Tripletclip: " in said and "Tripletclip_negative: " in said, said[-2000:]


def first_batch(**options):
    """The first training batch `compclip train` makes of these options (one process on the CPU, the file in order)."""
    from compclip.train import TrainConfig
    from compclip.train.trainer import Trainer

    trainer = Trainer(TrainConfig(batch_size=4, workers=0, shuffle=0, device="cpu", **options))
    batches = trainer._batches()
    try:
        return trainer, next(batches)
    finally:
        batches.close()


def released_view(model_name: str):
    """The transform the released code trains on: the third value of open_clip's `create_model_and_transforms`."""
    import open_clip

    import compclip.models.bundled  # noqa: F401  (registers the bundled configs with open_clip)

    return open_clip.create_model_and_transforms(model_name)[2]


def test_tripletclip_trains_on_the_released_view_of_its_images_and_negative_images(world, tmp_path):
    """The released src/main.py hands `get_dataloader` `create_model_and_transforms(...)[2]`, open_clip's evaluation
    transform, and `TripletClipData.__getitem__` applies it to image and neg_image alike: the training batch of the
    world's arrays is that transform of the same decoded images, negatives included, with no random crop."""
    root, _ = world
    _, batch = first_batch(method="tripletclip", model="compclip-tiny-world", train_data=str(root / "train" / "images.npy"),
                           out=str(tmp_path / "run"))
    images, negatives = np.load(root / "train" / "images.npy"), np.load(root / "train" / "negative_image.npy")
    records = [json.loads(line) for line in (root / "train" / "scenes.jsonl").read_text().splitlines()][:4]
    assert batch["caption"] == [r["caption"] for r in records]
    view = released_view("compclip-tiny-world")
    expected = torch.stack([view(Image.fromarray(images[r["index"]]).convert("RGB")) for r in records])
    expected_negatives = torch.stack([view(Image.fromarray(negatives[r["negative_image"]]).convert("RGB")) for r in records])
    assert torch.equal(batch["image"], expected) and torch.equal(batch["negative_image"], expected_negatives)


def test_the_released_finetuning_checkpoint_loads_from_the_key_its_training_code_saves_under(hub_cache):
    """The released src/train.py saves {"model_state_dict": model.state_dict(), "optimizer_state_dict", "epoch"}:
    `--model tripletclip-ft-b32` loads the weights from there, each equal to the saved one."""
    import open_clip

    from compclip.models import load_model
    from compclip.models.released import get_released, hand_path

    torch.manual_seed(3)
    saved = open_clip.create_model("ViT-B-32-quickgelu")
    optimizer = torch.optim.AdamW(saved.parameters(), lr=5e-4)
    path = hand_path(get_released("tripletclip-ft-b32"))
    path.parent.mkdir(parents=True)
    torch.save({"model_state_dict": saved.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "epoch": 9}, path)
    model, _, _ = load_model("tripletclip-ft-b32")
    loaded = model.state_dict()
    assert loaded.keys() == saved.state_dict().keys()
    assert all(torch.equal(loaded[k], v) for k, v in saved.state_dict().items())


def test_image_view_train_gives_tripletclip_open_clips_training_view_and_the_run_records_it(world, tmp_path):
    """`--image-view train` chooses open_clip's training view (RandomResizedCrop, batched over the arrays) for the image
    and its negative alike; config.json's options hold the view the run trained on, chosen or the method's own."""
    from compclip.data.augment import BatchedView

    root, _ = world
    data = str(root / "train" / "images.npy")
    trainer, batch = first_batch(method="tripletclip", model="compclip-tiny-world", train_data=data, out=str(tmp_path / "run"),
                                 image_view="train")
    assert isinstance(trainer.view, BatchedView) and trainer._config_record()["image_view"] == "train"
    negatives = np.load(root / "train" / "negative_image.npy")
    view = released_view("compclip-tiny-world")
    assert not torch.equal(batch["negative_image"][0], view(Image.fromarray(negatives[0]).convert("RGB")))
    own, _ = first_batch(method="tripletclip", model="compclip-tiny-world", train_data=data, out=str(tmp_path / "own"))
    assert own.view is None and own._config_record()["image_view"] == "eval"
