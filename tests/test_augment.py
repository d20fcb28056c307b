"""`BatchedView`: open_clip's training view of decoded arrays, made a batch at once, against torchvision's own image-by-image
crop and resize (through PIL) and open_clip's normalisation."""
import json

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as TF
from PIL import Image
from torchvision.transforms import RandomResizedCrop

from compclip.data import open_reader
from compclip.data.augment import TRIES, BatchedView
from compclip.models import load_model, train_preprocess


@pytest.fixture(scope="module")
def transform():
    model, _, _ = load_model("compclip-tiny-world")
    return train_preprocess(model)


def reference(transform, image: np.ndarray, box) -> torch.Tensor:
    """What open_clip's transform makes of `image` once its RandomResizedCrop has drawn `box`."""
    crop, convert, to_tensor, normalize = transform.transforms
    view = TF.resized_crop(Image.fromarray(image), *box, list(crop.size), crop.interpolation, antialias=crop.antialias)
    return normalize(to_tensor(convert(view)))


@pytest.mark.parametrize("side", [64, 50, 91, 200])  # the model's size, smaller, and larger (an antialiased downscale)
def test_a_batch_of_views_is_bit_for_bit_torchvisions_image_by_image(transform, side):
    view = BatchedView.of(transform)
    images = np.random.default_rng(side).integers(0, 256, (24, side, side, 3), dtype=np.uint8)
    samples = []
    for i, image in enumerate(images):
        torch.manual_seed(i)
        samples.append(view(image))
    boxes = [s["crop"] for s in samples]
    assert len(set(boxes)) > 12  # the boxes vary
    batch = view.batch(torch.stack([s["image"] for s in samples]), torch.tensor(boxes))
    expected = torch.stack([reference(transform, image, box) for image, box in zip(images, boxes, strict=True)])
    assert batch.shape == (24, 3, 64, 64) and batch.dtype == torch.float32
    assert torch.equal(batch, expected)


def test_crop_boxes_follow_torchvisions_rule(transform):
    """Inside the image, of an area in the scale's range and an aspect in the ratio's, uniform in position; where no
    try fits, torchvision's central fallback."""
    view = BatchedView.of(transform)
    rng = np.random.default_rng(0)
    boxes = [view.box(rng.random(2 * TRIES + 2).tolist(), 64, 64) for _ in range(2000)]
    for top, left, h, w in boxes:
        assert 0 <= top <= 64 - h and 0 <= left <= 64 - w
        assert 0.9 * 4096 * 0.95 <= h * w <= 4096  # rounding of the sides moves the area a little
        assert 3 / 4 * 0.93 <= w / h <= 4 / 3 * 1.07
    widths = [w for *_, w in boxes]
    assert min(widths) < 58 and max(widths) == 64
    tall = BatchedView(64, (1.5, 2.0), view.ratio, (0.5,) * 3, (0.5,) * 3)  # no box of that area fits: the fallback
    for height, width in ((64, 64), (30, 90), (90, 30)):
        expected = RandomResizedCrop.get_params(torch.zeros(3, height, width), [1.5, 2.0], list(view.ratio))
        assert tall.box([0.5] * (2 * TRIES + 2), height, width) == expected


@pytest.mark.filterwarnings("ignore:Unused augmentation cfg items")
def test_only_open_clips_plain_crop_is_batched(transform):
    from open_clip.transform import AugmentationCfg, PreprocessCfg, image_transform_v2

    model, _, _ = load_model("compclip-tiny-world")
    jitter = image_transform_v2(PreprocessCfg(**model.visual.preprocess_cfg), is_train=True,
                                aug_cfg=AugmentationCfg(color_jitter_prob=0.5, color_jitter=(0.4, 0.4, 0.4, 0.1)))
    assert BatchedView.of(transform) is not None
    assert BatchedView.of(jitter) is None
    assert BatchedView.of(image_transform_v2(PreprocessCfg(**model.visual.preprocess_cfg), is_train=False)) is None


def test_an_array_reader_hands_the_view_its_arrays_and_resumes_on_the_same_boxes(tmp_path, transform):
    """The reader seeds each sample, so a sample's box does not depend on where the reading started."""
    n = 12
    pixels = np.random.default_rng(1).integers(0, 256, (n, 64, 64, 3), dtype=np.uint8)
    np.save(tmp_path / "images.npy", pixels)
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"caption": f"scene {i}"}) + "\n" for i in range(n)))

    def read(**state):
        reader = open_reader(tmp_path / "images.npy", transform=BatchedView.of(transform))
        reader.sample_seed = 7
        for key, value in state.items():
            setattr(reader, key, value)
        return list(reader)

    whole, resumed = read(), read(resume_positions={0: 5})
    assert [s["caption"] for s in resumed] == [s["caption"] for s in whole[5:]]
    assert [s["crop"] for s in resumed] == [s["crop"] for s in whole[5:]]
    boxes = [tuple(s["crop"]) for s in whole]
    assert len(set(boxes)) >= n - 2  # each sample its own box (two may both fall back to the central crop), not one for all
    assert [tuple(s["crop"]) for s in read(epoch=1)] != boxes and [tuple(s["crop"]) for s in read()] == boxes
    assert all(torch.equal(s["image"], torch.from_numpy(pixels[i])) for i, s in enumerate(whole))


def test_the_trainer_batches_the_views_of_arrays_only(tmp_path):
    """Decoded arrays go through `BatchedView`; image files keep open_clip's transform in the reader, and so does a method
    with a view of its own (CLIC's joined pairs)."""
    from compclip.train import TrainConfig
    from compclip.train.trainer import Trainer

    pixels = np.random.default_rng(2).integers(0, 256, (8, 64, 64, 3), dtype=np.uint8)
    np.save(tmp_path / "images.npy", pixels)
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"caption": f"a red square number {i}"}) + "\n" for i in range(8)))
    (tmp_path / "images").mkdir()
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(tmp_path / "images" / f"{i}.png")
    (tmp_path / "pairs.csv").write_text("image,caption\n" + "".join(f"{i}.png,a red square number {i}\n" for i in range(8)))

    def trainer(data, method="siglip", concepts=None):
        return Trainer(TrainConfig(method=method, model="compclip-tiny-world", train_data=str(tmp_path / data), concepts=concepts,
                                   out=str(tmp_path / "run"), batch_size=4, workers=0, device="cpu"))

    arrays = trainer("images.npy")
    assert isinstance(arrays.view, BatchedView) and arrays.reader.transform is arrays.view
    batch = next(arrays._batches())
    assert batch["image"].shape == (4, 3, 64, 64) and batch["image"].dtype == torch.float32
    assert trainer("pairs.csv").view is None
    from compclip.concepts import build_store, iter_captions
    from compclip.methods import method_concept_fields

    build_store(iter_captions(tmp_path / "scenes.jsonl"), tmp_path / "concepts", set(method_concept_fields("clic")), workers=1)
    assert trainer("images.npy", "clic", str(tmp_path / "concepts")).view is None


def test_image_view_eval_trains_any_method_on_open_clips_evaluation_view(tmp_path):
    """`--image-view eval` gives a method whose own view is the training view (SigLIP) open_clip's evaluation transform
    instead, image by image on the decoded arrays: no crop box is drawn."""
    from compclip.models import eval_preprocess
    from compclip.train import TrainConfig
    from compclip.train.trainer import Trainer

    pixels = np.random.default_rng(5).integers(0, 256, (4, 48, 80, 3), dtype=np.uint8)
    np.save(tmp_path / "images.npy", pixels)
    (tmp_path / "scenes.jsonl").write_text("".join(json.dumps({"caption": f"a red square number {i}"}) + "\n" for i in range(4)))
    trainer = Trainer(TrainConfig(method="siglip", model="compclip-tiny-world", train_data=str(tmp_path / "images.npy"),
                                  out=str(tmp_path / "run"), batch_size=4, workers=0, shuffle=0, device="cpu", image_view="eval"))
    assert trainer.view is None
    batch = next(trainer._batches())
    view = eval_preprocess(load_model("compclip-tiny-world")[0])
    assert torch.equal(batch["image"], torch.stack([view(Image.fromarray(p)) for p in pixels]))


def test_an_image_view_compclip_does_not_know_is_one_error_line(tmp_path, capsys):
    from conftest import run_main

    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data",
                            tmp_path / "t.csv", "--image-view", "crop", "--out", tmp_path / "run")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and lines == ["error: --image-view must be one of train, eval, not 'crop'"], err


def test_a_run_saved_before_image_view_resumes_on_the_training_view_it_had(tmp_path, capsys):
    """A checkpoint whose options name no image view (written before --image-view) trained on open_clip's training view:
    a method whose own view that is goes on; asking it for the evaluation view is another run, refused in one line."""
    from conftest import run_main
    from test_train import make_dataset

    data = make_dataset(tmp_path, n=8)
    args = ["-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data, "--out", tmp_path / "run",
            "--batch-size", "4", "--workers", "0"]
    assert run_main(capsys, *args, "--steps", "1")[0] == 0
    (config,) = (tmp_path / "run" / "checkpoints").glob("step_*/config.json")
    saved = json.loads(config.read_text())
    del saved["train_args"]["image_view"]
    config.write_text(json.dumps(saved))
    code, _, err = run_main(capsys, *args, "--steps", "1", "--image-view", "eval")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "image_view 'train' -> 'eval'" in lines[0], err
    code, _, err = run_main(capsys, *args, "--steps", "2")
    assert code == 0, err[-2000:]
