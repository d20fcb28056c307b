"""CoN-CLIP (`--method conclip`): its loss against the released `CustomLossWithNegatives` / `CustomLoss`
(src/training_utils/loss_functions.py of jaisidhsingh/CoN-CLIP) written out another way, its data fields
(`negated_caption`, `distractor_image`) through the real readers and `compclip train` with the image tower frozen, and the
binding world's distractors (one object taken out, the negated caption naming it absent)."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.data import open_reader
from compclip.methods import CoNCLIPLoss
from compclip.world import Scene, WorldConfig, generate
from conftest import assert_same_terms, run_main


def released_formula(image, text, negated, distractor, scale):
    """The released losses one row at a time, as −log softmax of the row at its target. With distractors
    (CustomLossWithNegatives): images I ([I ; I'] in the released batch) against [c ; c'], captions against [I ; I'], each
    distractor against [c' ; c] (T_rev), the mean of the three means. Without (CustomLoss): images against [c ; c'],
    captions against the images alone, the mean of the two."""
    n = image.shape[0]

    def mean_nll(rows, columns):
        return torch.stack([torch.logsumexp(scale * columns @ rows[i], 0) - scale * columns[i] @ rows[i] for i in range(n)]).mean()

    if distractor is None:
        return {"conclip_image": mean_nll(image, torch.cat([text, negated])) / 2, "conclip_text": mean_nll(text, image) / 2}
    return {"conclip_image": mean_nll(image, torch.cat([text, negated])) / 3,
            "conclip_text": mean_nll(text, torch.cat([image, distractor])) / 3,
            "conclip_distractor": mean_nll(distractor, torch.cat([negated, text])) / 3}


@pytest.mark.parametrize("distractors", [True, False])
def test_conclip_loss_is_the_released_formula_with_its_gradients(distractors):
    """Six samples: every term and every input's gradient, with distractor images (the released default) and without."""
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(6, 8, generator=g, dtype=torch.float64).requires_grad_() for _ in range(4 if distractors else 3)]
    twins = [x.detach().clone().requires_grad_() for x in leaves]
    scale = torch.tensor(12.0, dtype=torch.float64)
    ours = [F.normalize(x, dim=-1) for x in leaves]
    theirs = [F.normalize(x, dim=-1) for x in twins]
    terms = CoNCLIPLoss()(*ours, *([] if distractors else [None]), scale)
    expected = released_formula(*theirs, *([] if distractors else [None]), scale)
    assert_same_terms(terms, expected, leaves, twins)


def test_conclip_loss_refuses_a_distractor_per_other_image():
    x = F.normalize(torch.randn(4, 8), dim=-1)
    with pytest.raises(ValueError, match="distractor_image_features"):
        CoNCLIPLoss()(x, x, x, x[:3], torch.tensor(10.0))


def write_jsonl(tmp_path, distractors=True):
    (tmp_path / "img").mkdir()
    lines = []
    for i in range(4):
        Image.new("RGB", (16, 16), (40 * i, 80, 120)).save(tmp_path / "img" / f"{i}.png")
        Image.new("RGB", (16, 16), (120, 80, 40 * i)).save(tmp_path / "img" / f"coco{i}.png")
        lines.append({"image": f"img/{i}.png", "caption": f"a cup number {i}", "negated_caption": f"no cup number {i}",
                      **({"distractor_image": f"img/coco{i}.png"} if distractors else {})})
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return data


def test_negated_captions_and_distractors_are_read_from_json_lines(tmp_path):
    """A record's distractor is a path found as its image's is, decoded as the image is, its negated caption a text."""
    data = write_jsonl(tmp_path)
    reader = open_reader(data, fields={"negated_caption": "negated_caption", "distractor_image": "distractor_image"})
    samples = list(reader)
    assert [s["negated_caption"] for s in samples] == [f"no cup number {i}" for i in range(4)]
    assert np.array_equal(np.asarray(samples[2]["distractor_image"]), np.asarray(Image.open(tmp_path / "img" / "coco2.png")))


def test_without_distractor_images_conclip_trains_on_negated_captions_alone(tmp_path, capsys):
    """`--method-opt distractor_images=false` (the released --negative-images off) reads no distractor: a file without
    them trains, with the two terms of CustomLoss."""
    data = write_jsonl(tmp_path, distractors=False)
    code, _, err = run_main(capsys, "-q", "train", "--method", "conclip", "--method-opt", "distractor_images=false", "--model",
                            "compclip-tiny-siglip", "--train-data", data, "--steps", "1", "--batch-size", "4", "--workers", "0",
                            "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    said = (tmp_path / "run" / "train.log").read_text()
    assert "Conclip_image: " in said and "Conclip_text: " in said and "Conclip_distractor" not in said


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    cfg = WorldConfig(seed=5, n_train=40, n_val=4, n_test=4, size=32, min_objects=1, max_objects=3)
    return generate(tmp_path_factory.mktemp("world") / "w", cfg, workers=1), cfg


def _named(caption: str) -> tuple[list[str], str]:
    """The objects a negated caption names as present, and the one it names as absent."""
    body = caption.removeprefix("There is ").removesuffix(".")
    present, _, absent = body.rpartition("no ")
    present = present.removesuffix(", but ").strip()
    names = [p.removeprefix("a ") for p in present.replace(" and ", ", ").split(", ")] if present else []
    return names, absent


def test_the_worlds_distractor_takes_one_object_out_and_its_negated_caption_holds_for_it_alone(world):
    """Each training scene's distractor: the scene less one object, everything else the same; the pixels that differ lie in
    that object's box; the negated caption names every object left and the one taken out as absent, so it is false for the
    scene and true for the distractor; the array reader hands each sample its own row."""
    root, cfg = world
    images, distractors = np.load(root / "train" / "images.npy"), np.load(root / "train" / "distractor_image.npy")
    records = [json.loads(line) for line in (root / "train" / "scenes.jsonl").read_text().splitlines()]
    for record in records:
        scene, kept = Scene.from_dict(record["scene"]), Scene.from_dict(record["distractor_scene"])
        (gone,) = [o for o in scene.objects if o not in kept.objects]
        assert len(kept.objects) == len(scene.objects) - 1 and kept.background == scene.background
        names = {f"{o.size} {o.color} {o.shape}" for o in scene.objects}
        present, absent = _named(record["negated_caption"])
        assert absent == f"{gone.size} {gone.color} {gone.shape}" and absent in names
        assert set(present) == {f"{o.size} {o.color} {o.shape}" for o in kept.objects} and absent not in present
        ys, xs = np.nonzero((images[record["index"]] != distractors[record["index"]]).any(-1))
        reach = gone.radius * cfg.size + 1
        assert len(ys) and (np.abs(gone.x * cfg.size - xs - 0.5) <= reach).all() and (np.abs(gone.y * cfg.size - ys - 0.5) <= reach).all()
    reader = open_reader(root / "train" / "images.npy", fields={"negated_caption": "negated_caption",
                                                                "distractor_image": "distractor_image"})
    for sample, record in zip(reader, records, strict=True):
        assert np.array_equal(np.asarray(sample["distractor_image"]), distractors[record["index"]])
        assert sample["negated_caption"] == record["negated_caption"]


def test_conclip_trains_on_the_worlds_array_with_the_image_tower_frozen(world, tmp_path, capsys):
    """One step of `compclip train --method conclip` on the world's arrays: three terms logged; the image tower's weights
    are those it started from (the released --lock-image-encoder on), the text tower's are not."""
    from safetensors.torch import load_file

    from compclip.models import load_model

    root, _ = world
    code, _, err = run_main(capsys, "-q", "train", "--method", "conclip", "--model", "compclip-tiny-siglip", "--train-data",
                            root / "train" / "images.npy", "--steps", "1", "--batch-size", "4", "--workers", "0", "--lr", "1e-3",
                            "--out", tmp_path / "run")
    assert code == 0, err[-3000:]
    said = (tmp_path / "run" / "train.log").read_text()
    assert all(f"{t}: " in said for t in ("Conclip_image", "Conclip_text", "Conclip_distractor")), said[-2000:]
    before = load_model("compclip-tiny-siglip")[0].state_dict()
    (after,) = (tmp_path / "run" / "checkpoints").glob("*/model.safetensors")
    after = load_file(after)
    visual = [k for k in before if k.startswith("visual.")]
    assert visual and all(torch.equal(before[k], after[k]) for k in visual)
    assert not all(torch.equal(before[k], after[k]) for k in before if k.startswith("text."))


def write_ccneg(root, mapping, held=40_000):
    """A CC-Neg release folder of 5 training records and the 40,000 evaluation ones: the release's torch files (dicts,
    lists, strings, a tensor), its CC3M paths under the authors' prefix, COCO ids listed out of order."""
    root.mkdir()
    notes = [{"json": {"caption": f"a dog number {i}"}, "sop_data": {"negative-prompt": f"a park, but no dog {i}, no cat"}}
             for i in range(5)]
    del notes[3]["sop_data"]
    notes += [{"json": {"caption": "held out"}, "sop_data": {"negative-prompt": "no, dog"}}] * held  # one object, pickled once
    paths = [f"/workspace/datasets/cc3m/subset/{i:05d}.jpg" for i in range(len(notes))]
    torch.save({"image_paths": paths, "annotations": notes}, root / "ccneg_preprocessed.pt")
    torch.save(mapping, root / "distractor_image_mapping.pt")
    coco = root / "captions_train2017.json"
    coco.write_text(json.dumps({"images": [{"id": 30, "file_name": "c.jpg"}, {"id": 10, "file_name": "a.jpg"},
                                           {"id": 20, "file_name": "b.jpg"}], "annotations": []}))
    return coco


def test_compclip_data_ccneg_reads_the_release_as_its_training_dataset_does(tmp_path, capsys):
    """`compclip data ccneg` against `FineTuningDatasetWithNegatives.__getitem__` (src/data/finetuning_datasets.py) written
    out here: the training split is all but the last 40,000 records, the caption `json.caption`, the negated caption
    `sop_data["negative-prompt"]` without commas, the distractor COCO image `mapping[i][0]` of the ids in sorted order;
    a record without a negated caption and one whose distractor is past COCO's images are skipped, counted and named."""
    root = tmp_path / "ccneg"
    coco = write_ccneg(root, torch.tensor([[2, 0], [0, 1], [1, 2], [2, 1], [9, 0]]))
    out = tmp_path / "train.jsonl"
    code, said, err = run_main(capsys, "data", "ccneg", "--root", root, "--coco-images", tmp_path / "train2017", "--coco-captions",
                               coco, "--out", out)
    assert code in (0, None), err
    ids = sorted(im["id"] for im in json.loads(coco.read_text())["images"])
    names = {im["id"]: im["file_name"] for im in json.loads(coco.read_text())["images"]}
    expected = []
    for idx, top in ((0, 2), (1, 0), (2, 1)):
        expected.append({"image": f"{root}/subset/{idx:05d}.jpg", "caption": f"a dog number {idx}",
                         "negated_caption": f"a park but no dog {idx} no cat",
                         "distractor_image": str(tmp_path / "train2017" / names[ids[top]])})
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    assert f"wrote {out}: 3 records; skipped {{'no caption or negated caption': 1, 'no distractor': 1}}" in said
    code, said, _ = run_main(capsys, "data", "ccneg", "--root", root, "--split", "eval", "--out", tmp_path / "eval.jsonl")
    held = [json.loads(line) for line in (tmp_path / "eval.jsonl").read_text().splitlines()]
    assert len(held) == 40_000 and held[0] == {"image": f"{root}/subset/00005.jpg", "caption": "held out", "negated_caption": "no dog"}


class Payload:
    def __reduce__(self):
        return (print, ("pickled code ran",))


def test_compclip_data_ccneg_runs_no_pickled_code(tmp_path, capsys):
    """A mapping file holding a pickled object is refused in one line naming it; its code never runs."""
    root = tmp_path / "ccneg"
    coco = write_ccneg(root, [Payload()], held=0)
    code, said, err = run_main(capsys, "data", "ccneg", "--root", root, "--coco-images", tmp_path, "--coco-captions", coco, "--out",
                               tmp_path / "t.jsonl")
    assert code == 2 and "pickled code ran" not in said + err and not (tmp_path / "t.jsonl").exists()
    assert f"error: {root / 'distractor_image_mapping.pt'}: not a torch file of tensors, lists and strings" in err


def test_compclip_data_ccneg_refuses_a_coco_id_given_two_files(tmp_path, capsys):
    """The distractors' COCO file, as every COCO captions file compclip reads: an image id naming two files is one line."""
    root = tmp_path / "ccneg"
    coco = write_ccneg(root, torch.tensor([[0, 1]] * 5), held=0)
    listed = json.loads(coco.read_text())
    listed["images"].append({"id": 10, "file_name": "z.jpg"})
    coco.write_text(json.dumps(listed))
    code, _, err = run_main(capsys, "data", "ccneg", "--root", root, "--coco-images", tmp_path, "--coco-captions", coco, "--out",
                            tmp_path / "t.jsonl")
    assert code == 2 and f"error: {coco}: images[3] names image id 10 'z.jpg', an earlier record 'a.jpg'" in err, err


def test_compclip_data_ccneg_skips_and_names_a_negative_distractor_index_as_one_past_the_end(tmp_path, capsys):
    """A distractor index of -1 names no COCO image, as 3 (past the 3 images) names none: both records are skipped,
    counted under "no distractor" and named, never given COCO's last image by Python's wrap-around."""
    root = tmp_path / "ccneg"
    coco = write_ccneg(root, torch.tensor([[2, 0], [-1, 1], [1, 2], [2, 1], [3, 0]]), held=40_000)
    out = tmp_path / "train.jsonl"
    code, said, err = run_main(capsys, "data", "ccneg", "--root", root, "--coco-images", tmp_path / "train2017", "--coco-captions",
                               coco, "--out", out)
    assert code in (0, None), err
    assert [json.loads(line)["caption"] for line in out.read_text().splitlines()] == ["a dog number 0", "a dog number 2"]
    assert f"wrote {out}: 2 records; skipped {{'no distractor': 2, 'no caption or negated caption': 1}}" in said
    for record, index in ((1, -1), (4, 3)):
        assert f"{root / 'distractor_image_mapping.pt'}: record {record} skipped: no distractor among 3 COCO images (index {index}" in err


def test_conclip_trains_on_the_released_view_of_its_images_and_distractors(tmp_path):
    """The released conclip_fine_tuning.py hands the dataset `clip.load`'s `preprocess` (Resize, CenterCrop), which the
    image and, through CocoCaptions(transform=...), the distractor both take: the training batch of JSON lines of
    oblong images is open_clip's evaluation transform (`create_model_and_transforms(...)[2]`) of the same files."""
    from test_tripletclip import first_batch, released_view

    rng = np.random.default_rng(4)
    (tmp_path / "img").mkdir()
    lines = []
    for i in range(4):
        for name, size in ((f"{i}.png", (90, 60)), (f"coco{i}.png", (50, 80))):
            Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).save(tmp_path / "img" / name)
        lines.append({"image": f"img/{i}.png", "caption": f"a cup number {i}", "negated_caption": f"no cup number {i}",
                      "distractor_image": f"img/coco{i}.png"})
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    _, batch = first_batch(method="conclip", model="compclip-tiny-clip", train_data=str(data), out=str(tmp_path / "run"))
    assert batch["caption"] == [line["caption"] for line in lines]
    view = released_view("compclip-tiny-clip")
    for field, key in (("image", "image"), ("distractor_image", "distractor_image")):
        expected = torch.stack([view(Image.open(tmp_path / line[key]).convert("RGB")) for line in lines])
        assert torch.equal(batch[field], expected), field
