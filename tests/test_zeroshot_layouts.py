"""Zero-shot classification in the layouts CLIP_benchmark 1.6.2 reads (a wds set, CIFAR's pickled batches, ImageNet's
devkit and validation tar, an ImageNet variant with its class mask): compclip's acc1, acc5 and mean_per_class_recall
equal CLIP_benchmark's own `evaluate` over CLIP_benchmark's own dataset of the same files, and a seeded subset draws the
images CLIC's draw picks from CLIP_benchmark's order."""
from __future__ import annotations

import io
import json
import os
import pickle
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

BENCH_PATH = os.environ.get("COMPCLIP_BENCH_PATH")  # CLIP_benchmark installed in a folder of its own (`make test`)
COLOURS = ["red", "green", "blue", "yellow", "white", "black"]
TEMPLATES = ["a photo of a {c} thing.", "a {c} picture."]


@pytest.fixture(scope="module")
def clip_benchmark():
    if BENCH_PATH and BENCH_PATH not in sys.path:
        sys.path.append(BENCH_PATH)  # after compclip's own packages, so that none of them is shadowed
    return pytest.importorskip("clip_benchmark")


@pytest.fixture(scope="module")
def tiny():
    from compclip.models import load_model

    torch.manual_seed(0)
    return load_model("compclip-tiny-clip")


def picture(k: int, size: tuple[int, int] = (36, 28)) -> Image.Image:
    """Seeded noise over a colour that drifts with k: images the tiny model tells apart, some right, some wrong."""
    rng = np.random.default_rng(k)
    base = np.array([(37 * k) % 256, (91 * k) % 256, (53 * k) % 256], dtype=np.int16)
    pixels = np.clip(base + rng.integers(-60, 60, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, **({"format": "webp", "lossless": True} if fmt == "webp" else {"format": fmt}))
    return out.getvalue()


def write_wds(folder: Path, count: int = 30, per_shard: int = 12, drop_cls: int | None = None, label_of=None, image_of=None) -> None:
    """A set as `clip_benchmark_export_wds` writes it (clip_benchmark/webdataset_builder.py, `convert_dataset`): webdataset's
    ShardWriter into test/%d.tar, keys s%07d, then nshards.txt, classnames.txt and the templates. `image_of(k)`: sample
    k's image (PNG), else `picture(k)` in webp, png and jpeg by turns."""
    import webdataset

    (folder / "test").mkdir(parents=True)
    sink = webdataset.ShardWriter(str(folder / "test" / "%d.tar"), maxcount=per_shard, verbose=0)
    for k in range(count):
        fmt = ("webp", "png", "jpeg")[k % 3] if image_of is None else "png"
        sample = {"__key__": f"s{k:07d}", fmt.replace("jpeg", "jpg"): encoded(picture(k) if image_of is None else image_of(k), fmt)}
        if k != drop_cls:
            sample["cls"] = (label_of or (lambda i: i % len(COLOURS)))(k)
        sink.write(sample)
    sink.close()
    (folder / "test" / "nshards.txt").write_text(f"{-(-count // per_shard)}\n")
    (folder / "classnames.txt").write_text("\n".join(COLOURS) + "\n")
    (folder / "zeroshot_classification_templates.txt").write_text("\n".join(TEMPLATES) + "\n")


def compclip_metrics(tmp_path: Path, root: Path, name: str, **options) -> dict:
    """`compclip eval --benchmark zeroshot` over `root`, as the library runs it: the dataset's figures."""
    from compclip.eval import EvalConfig, evaluate

    out = tmp_path / "out"
    evaluate(EvalConfig(model="compclip-tiny-clip", benchmark="zeroshot", out=str(out), data_root=str(root), workers=0, device="cpu",
                        precision="fp32", ties="clip_benchmark", bench_options={"zeroshot": options} if options else {}))
    return json.loads((out / "zeroshot.json").read_text())["metrics"]


def clip_benchmark_accuracy():
    """CLIP_benchmark 1.6.2's own `accuracy` (metrics/zeroshot_classification.py), its source run with one change: the
    1-element array its last line casts with float() is cast with .item(), for numpy 2.x refuses float() of an array
    that is not 0-d. The rest of its `evaluate` runs as released."""
    import inspect

    from clip_benchmark.metrics import zeroshot_classification

    source = inspect.getsource(zeroshot_classification.accuracy)
    fixed = source.replace(".cpu().numpy()) / n for k in topk]", ".cpu().numpy().item()) / n for k in topk]")
    assert fixed != source, "CLIP_benchmark's accuracy is not the one pinned"
    defined: dict = {}
    exec(fixed, dict(vars(zeroshot_classification)), defined)
    return defined["accuracy"]


def reference(tiny, dataset, classnames, templates, batched: bool = False) -> dict:
    """CLIP_benchmark 1.6.2's `evaluate` (metrics/zeroshot_classification.py) in fp32 on the CPU, over a DataLoader as its
    cli.py makes one: its classifier, logits, top-k accuracies, the acc5 it leaves NaN under five classes, and its
    mean_per_class_recall (`clip_benchmark_accuracy` says the one line changed for numpy 2.x)."""
    from unittest.mock import patch

    from clip_benchmark.metrics import zeroshot_classification

    model, _, tokenizer = tiny
    if not hasattr(dataset, "classes"):  # a batched webdataset pipeline: its cli.py reads the classes off the dataset it built
        dataset.classes = classnames
    loader = torch.utils.data.DataLoader(dataset, batch_size=None if batched else 8, shuffle=False, num_workers=0)  # as its cli.py
    with patch.object(zeroshot_classification, "accuracy", clip_benchmark_accuracy()):
        return zeroshot_classification.evaluate(model, loader, tokenizer, classnames, templates, "cpu", amp=False)


def assert_same(ours: dict, theirs: dict) -> None:
    for key in ("acc1", "acc5", "mean_per_class_recall"):
        value = float("nan") if ours[key] is None else ours[key]  # acc5 under 5 classes: NaN there, null in compclip's JSON
        assert value == pytest.approx(theirs[key], abs=1e-6, nan_ok=True), key  # theirs: a float32 mean


def test_a_wds_set_scores_as_clip_benchmark_scores_it(clip_benchmark, tiny, tmp_path):
    from clip_benchmark.datasets.builder import build_wds_dataset

    root = tmp_path / "data"
    write_wds(root / "zeroshot" / "wds_colours")
    ours = compclip_metrics(tmp_path, root, "wds_colours")
    dataset = build_wds_dataset("colours", tiny[1], data_dir=str(root / "zeroshot" / "wds_colours"))
    theirs = reference(tiny, dataset.batched(8), dataset.classes, dataset.templates, batched=True)
    assert_same(ours["wds_colours"], theirs)
    assert ours["acc1"] == pytest.approx(theirs["acc1"]) and ours["wds_colours"]["layout"] == "wds"
    assert ours["wds_colours"]["templates_from"].endswith("zeroshot_classification_templates.txt")
    assert 0 < theirs["acc1"] < 1  # the fixture tells a right answer from a wrong one


def test_a_wds_sets_result_records_the_hash_of_each_text_file_it_read(tmp_path):
    """A wds set's classnames, templates and shard count are the files a zero-shot figure rests on besides its images:
    the result records each one's SHA-256 (its shards, the images, are not hashed), as every benchmark's files."""
    import hashlib

    root = tmp_path / "data"
    write_wds(root / "zeroshot" / "wds_colours")
    compclip_metrics(tmp_path, root, "wds_colours")
    files = json.loads((tmp_path / "out" / "zeroshot.json").read_text())["files"]
    folder = root / "zeroshot" / "wds_colours"
    read = {"classnames.txt", "zeroshot_classification_templates.txt", "test/nshards.txt"}
    assert files == {f"zeroshot/wds_colours/{name}": hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in read}


def test_a_seeded_subset_of_a_wds_set_is_clics_draw_over_its_order(tmp_path):
    import webdataset

    from compclip.eval import DualEncoderScorer
    from compclip.eval.benchmarks.zeroshot import Options, ZeroShot
    from compclip.models import load_model

    root = tmp_path / "data"
    write_wds(root / "zeroshot" / "colours", count=26, per_shard=5)
    order = [s["__key__"] for s in webdataset.WebDataset(str(root / "zeroshot" / "colours" / "test" / "{0..5}.tar"), shardshuffle=False)]
    drawn = list(range(len(order)))
    np.random.RandomState(7).shuffle(drawn)  # CLIC's shuffle_and_select after np.random.seed(7)
    scorer = DualEncoderScorer(*load_model("compclip-tiny-clip"), workers=0)
    result = ZeroShot().run(scorer, root, "clip_benchmark", options=Options(subset=9, subset_seed=7))
    assert [row["image"].rsplit("::", 1)[1].split(".")[0] for row in result.items] == [order[i] for i in drawn[:9]]
    assert result.metrics["colours"]["subset_order"] == "shards in order, samples in tar order"


@pytest.mark.parametrize(("fault", "expected"), [
    ("missing_shard", "nshards.txt lists 3 shards; 1 absent: 1.tar"),
    ("no_cls", "sample 's0000004' has no .cls"),
    ("out_of_range", ".cls 6 is out of range for the 6 classes"),
])
def test_a_broken_wds_set_is_one_line_naming_the_shard_and_sample(tmp_path, capsys, fault, expected):
    from compclip.cli import main

    folder = tmp_path / "data" / "zeroshot" / "colours"
    write_wds(folder, count=12, per_shard=4, drop_cls=4 if fault == "no_cls" else None,
              label_of=(lambda i: 6 if i == 7 else i % 6) if fault == "out_of_range" else None)
    if fault == "missing_shard":
        (folder / "test" / "1.tar").unlink()
    with pytest.raises(SystemExit) as exit_info:  # the benchmark cannot run: said in one line, its result marked incomplete
        main(["eval", "--model", "compclip-tiny-clip", "--benchmark", "zeroshot", "--out", str(tmp_path / "out"),
              "--data-root", str(tmp_path / "data"), "--workers", "0", "--device", "cpu"])
    said = capsys.readouterr()
    assert exit_info.value.code != 0 and "Traceback" not in said.out + said.err
    lines = [line for line in (said.out + said.err).splitlines() if expected in line]
    assert lines and all(str(folder) in line for line in lines)  # said once a stream, naming the shard
    assert json.loads((tmp_path / "out" / "zeroshot.json").read_text())["complete"] is False


def cifar_fixture(folder: Path, count: int = 30) -> tuple[np.ndarray, list[int]]:
    """torchvision's CIFAR-10 layout: cifar-10-batches-py/batches.meta and test_batch, pickled as the release is."""
    base = folder / "cifar-10-batches-py"
    base.mkdir(parents=True)
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    rows = np.stack([np.asarray(picture(k, (32, 32))).transpose(2, 0, 1).reshape(-1) for k in range(count)])
    labels = [(3 * k) % 10 for k in range(count)]
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": names, "num_vis": 3072}, f)
    with open(base / "test_batch", "wb") as f:
        pickle.dump({"batch_label": "testing batch 1 of 1", "data": rows, "labels": labels,
                     "filenames": [f"{k}.png" for k in range(count)]}, f)
    return rows, labels


def test_cifar10_batches_score_as_clip_benchmark_scores_them(clip_benchmark, tiny, tmp_path, monkeypatch):
    import torchvision.datasets.cifar
    from clip_benchmark.datasets.builder import build_dataset

    root = tmp_path / "data"
    cifar_fixture(root / "zeroshot" / "cifar10")
    ours = compclip_metrics(tmp_path, root, "cifar10")
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args: True)  # the fixture's checksums are not the release's
    dataset = build_dataset("cifar10", root=str(root / "zeroshot" / "cifar10"), transform=tiny[1], download=False)
    assert_same(ours["cifar10"], reference(tiny, dataset, dataset.classes, dataset.templates))
    assert ours["cifar10"]["templates_from"].endswith("[cifar10]") and ours["cifar10"]["classes"] == 10


def imagenet_fixture(folder: Path, per_class: int = 3, classes: int = 8) -> None:
    """torchvision's ImageNet layout: the devkit (meta.mat, the validation ground truth) and the validation tar, its
    images named in ILSVRC2012's order and labelled in the ground truth by ILSVRC2012_ID."""
    from scipy import io as scipy_io

    from compclip.eval.zeroshot_sources import clip_benchmark_json

    wnids = clip_benchmark_json("imagenet_wnids")["imagenet1k"]
    ids = list(range(1, 1001))
    np.random.default_rng(3).shuffle(ids)  # ILSVRC2012_IDs are not in WordNet-id order
    synsets = np.zeros((1000,), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("gloss", "O"), ("num_children", "O")])
    for row, k in enumerate(sorted(range(1000), key=lambda k: ids[k])):  # meta.mat lists them by ILSVRC2012_ID, as released
        synsets[row] = (ids[k], wnids[k], f"words {k}", "", 0)
    mat = io.BytesIO()
    scipy_io.savemat(mat, {"synsets": synsets})
    # ImageNet's first classes: torchvision labels by the folders it made, which are then ImageNet's first too
    labels = [ids[(5 * n) % classes] for n in range(per_class * classes)]
    truth = "".join(f"{v}\n" for v in labels).encode()
    folder.mkdir(parents=True)
    with tarfile.open(folder / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
        for name, data in (("meta.mat", mat.getvalue()), ("ILSVRC2012_validation_ground_truth.txt", truth)):
            info = tarfile.TarInfo(f"ILSVRC2012_devkit_t12/data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with tarfile.open(folder / "ILSVRC2012_img_val.tar", "w") as tar:
        for n in range(len(labels)):
            data = encoded(picture(n), "jpeg")
            info = tarfile.TarInfo(f"ILSVRC2012_val_{n + 1:08d}.JPEG")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def one_template(tmp_path: Path, name: str) -> str:
    """A custom template file (CLIP_benchmark's --custom_template_file, compclip's zeroshot.templates) of one template."""
    (tmp_path / "templates.json").write_text(json.dumps({name: ["a photo of a {c}."]}))
    return str(tmp_path / "templates.json")


def test_imagenet_devkit_and_validation_tar_score_as_clip_benchmark_scores_them(clip_benchmark, tiny, tmp_path, monkeypatch):
    import torchvision.datasets.imagenet
    from clip_benchmark.datasets.builder import build_dataset

    from compclip.eval.zeroshot_sources import open_source

    root = tmp_path / "data"
    imagenet_fixture(root / "zeroshot" / "imagenet1k")
    templates = one_template(tmp_path, "imagenet1k")  # 1,000 classes: one prompt each keeps the test fast
    ours = compclip_metrics(tmp_path, root, "imagenet1k", templates=templates)
    theirs_root = tmp_path / "theirs"  # torchvision unpacks the tar where it lies: a copy of its own
    theirs_root.mkdir()
    for name in ("ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_img_val.tar"):
        (theirs_root / name).symlink_to(root / "zeroshot" / "imagenet1k" / name)
    monkeypatch.setattr(torchvision.datasets.imagenet, "check_integrity", lambda path, md5=None: os.path.isfile(path))  # not the release
    dataset = build_dataset("imagenet1k", root=str(theirs_root), transform=tiny[1], custom_template_file=templates)
    assert not (root / "zeroshot" / "imagenet1k" / "val").exists()  # compclip unpacked nothing
    source = open_source(root / "zeroshot" / "imagenet1k")  # its images and labels in torchvision's order
    assert [(Path(ref.member).name, label) for ref, label in zip(source.images, source.labels, strict=True)] == [
        (Path(path).name, label) for path, label in dataset.samples]
    assert_same(ours["imagenet1k"], reference(tiny, dataset, dataset.classes, dataset.templates))


def test_imagenet_r_class_folders_take_their_classes_masked_as_clip_benchmark_masks_them(clip_benchmark, tiny, tmp_path):
    from clip_benchmark.datasets.builder import build_dataset

    from compclip.eval.zeroshot_sources import clip_benchmark_json

    root = tmp_path / "data"
    wnids = clip_benchmark_json("imagenet_wnids")
    variant = [w for w in wnids["imagenet1k"] if w in set(wnids["imagenet-r"])]
    for c, wnid in enumerate(variant[:7]):  # the variant's first classes: ImageFolder's labels are then their places
        (root / "zeroshot" / "imagenet-r" / wnid).mkdir(parents=True)
        for n in range(3):
            picture(10 * c + n).save(root / "zeroshot" / "imagenet-r" / wnid / f"{n}.png")
    templates = one_template(tmp_path, "imagenet-r")
    ours = compclip_metrics(tmp_path, root, "imagenet-r", templates=templates)
    dataset = build_dataset("imagenet-r", root=str(root / "zeroshot" / "imagenet-r"), transform=tiny[1], custom_template_file=templates)
    assert len(dataset.classes) == 200 and ours["imagenet-r"]["classes"] == 200
    assert_same(ours["imagenet-r"], reference(tiny, dataset, dataset.classes, dataset.templates))


def build_theirs(name: str, root: Path, tiny, **options):
    """CLIP_benchmark's own dataset over the same files, as its cli.py builds it for the test split (`tiny` None: no
    preprocess, each image as the dataset's class reads it)."""
    from clip_benchmark.datasets.builder import build_dataset

    return build_dataset(name, root=str(root), transform=tiny[1] if tiny else None, download=False, **options)


def save_pictures(files: list[Path], first: int = 0) -> None:
    for k, file in enumerate(files):
        file.parent.mkdir(parents=True, exist_ok=True)
        picture(first + k).save(file)


def dtd_fixture(folder: Path) -> None:
    """torchvision's DTD layout: dtd/dtd/labels/test1.txt (class/file lines) and dtd/dtd/images/<class>/<file>."""
    base = folder / "dtd" / "dtd"
    lines = [f"{c}/{c}_{n:04d}.jpg" for n in range(4) for c in ("banded", "blotchy", "braided", "bubbly", "bumpy", "chequered")]
    save_pictures([base / "images" / line for line in lines])
    (base / "labels").mkdir()
    (base / "labels" / "test1.txt").write_text("".join(f"{line}\n" for line in lines))


def food101_fixture(folder: Path) -> None:
    """torchvision's Food101 layout: food-101/meta/test.json ({class: [class/id]}) and food-101/images/<class>/<id>.jpg."""
    base = folder / "food-101"
    meta = {c: [f"{c}/{100 + n}" for n in range(4)] for c in ("apple_pie", "baby_back_ribs", "baklava", "beef_carpaccio", "bibimbap")}
    save_pictures([base / "images" / f"{rel}.jpg" for rels in meta.values() for rel in rels], first=40)
    (base / "meta").mkdir()
    (base / "meta" / "test.json").write_text(json.dumps(meta))


def flowers_fixture(folder: Path) -> None:
    """torchvision's Flowers102 layout: flowers-102/jpg/image_%05d.jpg, imagelabels.mat (1-based) and setid.mat's tstid."""
    from scipy import io as scipy_io

    base = folder / "flowers-102"
    count = 30
    save_pictures([base / "jpg" / f"image_{k:05d}.jpg" for k in range(1, count + 1)], first=80)
    scipy_io.savemat(base / "imagelabels.mat", {"labels": np.array([1 + (7 * k) % 102 for k in range(count)])})
    scipy_io.savemat(base / "setid.mat", {"tstid": np.array([k for k in range(count, 0, -1) if k % 4]),
                                          "trnid": np.array([4]), "valid": np.array([8])})


def mnist_fixture(folder: Path, count: int = 24) -> None:
    """torchvision's MNIST layout: MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte in the IDX format."""
    import struct

    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True)
    pixels = np.stack([np.asarray(picture(k, (28, 28)).convert("L")) for k in range(count)])
    labels = np.array([(3 * k) % 10 for k in range(count)], dtype=np.uint8)
    for part in ("train", "t10k"):
        (raw / f"{part}-images-idx3-ubyte").write_bytes(struct.pack(">4i", 2051, count, 28, 28) + pixels.tobytes())
        (raw / f"{part}-labels-idx1-ubyte").write_bytes(struct.pack(">2i", 2049, count) + labels.tobytes())


TORCHVISION_FIXTURES = {"dtd": dtd_fixture, "food101": food101_fixture, "flowers": flowers_fixture, "mnist": mnist_fixture}


@pytest.mark.parametrize("name", list(TORCHVISION_FIXTURES))
def test_torchvision_layouts_score_as_clip_benchmark_scores_them(clip_benchmark, tiny, tmp_path, monkeypatch, name):
    import torchvision.datasets.flowers102

    monkeypatch.setattr(torchvision.datasets.flowers102, "check_integrity", lambda path, md5=None: os.path.isfile(path))  # not the release
    root = tmp_path / "data"
    TORCHVISION_FIXTURES[name](root / "zeroshot" / name)
    ours = compclip_metrics(tmp_path, root, name)
    dataset = build_theirs(name, root / "zeroshot" / name, tiny)
    assert ours[name]["classes"] == len(dataset.classes) and ours[name]["n"] == len(dataset)
    assert_same(ours[name], reference(tiny, dataset, dataset.classes, dataset.templates))
    assert ours[name]["templates_from"].endswith(f"[{name}]")


def test_a_torchvision_layout_without_its_files_is_one_line_naming_the_folder(tmp_path, capsys):
    from compclip.cli import main

    folder = tmp_path / "data" / "zeroshot" / "food101"
    food101_fixture(folder)
    (folder / "food-101" / "meta" / "test.json").unlink()
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", "compclip-tiny-clip", "--benchmark", "zeroshot", "--out", str(tmp_path / "out"),
              "--data-root", str(tmp_path / "data"), "--workers", "0", "--device", "cpu"])
    said = capsys.readouterr()
    assert exit_info.value.code != 0 and "Traceback" not in said.out + said.err
    lines = [line for line in (said.out + said.err).splitlines() if "meta/test.json: absent; torchvision's Food101 reads it" in line]
    assert lines and all(str(folder) in line for line in lines)
    assert json.loads((tmp_path / "out" / "zeroshot.json").read_text())["complete"] is False


def voc_fixture(folder: Path) -> None:
    """VOC2007's test layout as CLIP_benchmark reads it: VOCdevkit/VOC2007/ImageSets/Main/aeroplane_test.txt, one
    Annotations/<id>.xml per image (objects with their boxes, one image with none), JPEGImages/<id>.jpg."""
    from compclip.eval.zeroshot_sources import VOC_CLASSES

    base = folder / "VOCdevkit" / "VOC2007"
    ids = [f"{k:06d}" for k in range(1, 13)]
    (base / "ImageSets" / "Main").mkdir(parents=True)
    (base / "ImageSets" / "Main" / "aeroplane_test.txt").write_text("".join(f"{i} {1 if k % 2 else -1}\n" for k, i in enumerate(ids)))
    (base / "Annotations").mkdir()
    (base / "JPEGImages").mkdir()
    for k, image_id in enumerate(ids):  # two pictures side by side: a box holds one of them, so a crop differs from the whole
        whole = Image.new("RGB", (96, 40))
        whole.paste(picture(k, (48, 40)), (0, 0))
        whole.paste(picture(k + 50, (48, 40)), (48, 0))
        whole.save(base / "JPEGImages" / f"{image_id}.jpg")
        objects = "".join(f"<object><name>{VOC_CLASSES[(5 * k + 3 * j) % 20]}</name><pose>Left</pose><bndbox><xmin>{2 + 48 * j}</xmin>"
                          f"<ymin>{1 + k % 5}</ymin><xmax>{44 + 48 * j}</xmax><ymax>{35 + j}</ymax></bndbox></object>"
                          for j in range(k % 3))
        (base / "Annotations" / f"{image_id}.xml").write_text(f"<annotation><filename>{image_id}.jpg</filename>{objects}</annotation>")


def test_voc2007_crops_score_as_clip_benchmark_scores_them(clip_benchmark, tiny, tmp_path):
    root = tmp_path / "data"
    voc_fixture(root / "zeroshot" / "voc2007")
    ours = compclip_metrics(tmp_path, root, "voc2007")
    dataset = build_theirs("voc2007", root / "zeroshot" / "voc2007", tiny, split="test")
    assert ours["voc2007"]["n"] == len(dataset.bndboxes) == 12  # one image a box: 0+1+2 objects over 12 images
    assert_same(ours["voc2007"], reference(tiny, dataset, dataset.classes, dataset.templates))
    from compclip.eval.zeroshot_sources import open_source

    source, dataset.transform = open_source(root / "zeroshot" / "voc2007"), None  # each crop's pixels, before either preprocess
    for k, ref in enumerate(source.images):
        assert np.array_equal(np.asarray(ref.decode()), np.asarray(dataset[k][0])) and source.labels[k] == dataset[k][1]


def test_voc2007_multilabel_is_clip_benchmarks_mean_average_precision(clip_benchmark, tiny, tmp_path):
    from clip_benchmark.metrics.zeroshot_classification import average_precision_per_class, run_classification, zero_shot_classifier

    root = tmp_path / "data"
    voc_fixture(root / "zeroshot" / "voc2007_multilabel")
    ours = compclip_metrics(tmp_path, root, "voc2007_multilabel")["voc2007_multilabel"]
    dataset = build_theirs("voc2007_multilabel", root / "zeroshot" / "voc2007_multilabel", tiny, split="test")
    model, _, tokenizer = tiny
    classifier = zero_shot_classifier(model, tokenizer, dataset.classes, dataset.templates, "cpu", amp=False)
    logits, target = run_classification(model, classifier, torch.utils.data.DataLoader(dataset, batch_size=5), "cpu", amp=False)
    assert target.shape == (12, 20) and ours["n"] == 12 and "acc" not in ours
    assert ours["mean_average_precision"] == pytest.approx(average_precision_per_class(logits, target).mean().item(), abs=1e-6)


def test_imagenetv2_scores_as_clip_benchmark_and_a_short_copy_is_named_incomplete(clip_benchmark, tiny, tmp_path, monkeypatch):
    import clip_benchmark.datasets.imagenetv2 as imagenetv2

    root = tmp_path / "data"
    folder = root / "zeroshot" / "imagenetv2"
    save_pictures([folder / "ImageNetV2-matched-frequency" / str((7 * k) % 13) / f"{k}.jpeg" for k in range(20)], first=5)
    templates = one_template(tmp_path, "imagenetv2")
    ours = compclip_metrics(tmp_path, root, "imagenetv2", templates=templates)
    monkeypatch.setattr(imagenetv2, "V2_DATASET_SIZE", 20)  # the release holds 10,000: the fixture is the whole set to CLIP_benchmark
    dataset = build_theirs("imagenetv2", folder, tiny, custom_template_file=templates)
    assert_same(ours["imagenetv2"], reference(tiny, dataset, dataset.classes, dataset.templates))
    result = json.loads((tmp_path / "out" / "zeroshot.json").read_text())
    assert result["complete"] is False and "20 images of the release's 10,000" in json.dumps(result)


def stl10_fixture(folder: Path, count: int = 12) -> None:
    """torchvision's STL10 layout: stl10_binary/test_X.bin (channel-major, each channel column-major, as the release
    stores 96 x 96 images), test_y.bin (1-based labels) and class_names.txt."""
    base = folder / "stl10_binary"
    base.mkdir(parents=True)
    pixels = np.stack([np.asarray(picture(k, (96, 96))).transpose(2, 1, 0) for k in range(count)])  # channel, column, row
    base.joinpath("test_X.bin").write_bytes(pixels.tobytes())
    base.joinpath("test_y.bin").write_bytes(bytes(1 + (7 * k) % 10 for k in range(count)))
    base.joinpath("class_names.txt").write_text("airplane\nbird\ncar\ncat\ndeer\ndog\nhorse\nmonkey\nship\ntruck\n")


def sun397_fixture(folder: Path) -> None:
    """torchvision's SUN397 layout: SUN397/ClassName.txt (/<letter>/<class>[/<kind>]) and SUN397/<letter>/<class>/sun_*.jpg."""
    base = folder / "SUN397"
    classes = ["/a/abbey", "/a/apartment_building/outdoor", "/b/badlands", "/b/bakery/shop"]
    save_pictures([base / c[1:] / f"sun_{k:03d}{c[-1]}.jpg" for k in range(3) for c in classes], first=11)
    base.joinpath("ClassName.txt").write_text("".join(f"{c}\n" for c in classes))


def cars_fixture(folder: Path) -> None:
    """torchvision's StanfordCars layout: stanford_cars/devkit/cars_meta.mat (class_names), the test annotations with
    labels (fname, 1-based class) and stanford_cars/cars_test/<fname>."""
    from scipy import io as scipy_io

    base = folder / "stanford_cars"
    (base / "devkit").mkdir(parents=True)
    names = np.array(["AM General Hummer SUV 2000", "Acura RL Sedan 2012", "Audi TTS Coupe 2012", "BMW M3 Coupe 2012"], dtype=object)
    scipy_io.savemat(base / "devkit" / "cars_meta.mat", {"class_names": names.reshape(1, -1)})
    files = [f"{k:05d}.jpg" for k in range(1, 13)]
    annotations = np.zeros((len(files),), dtype=[("fname", "O"), ("class", "O")])
    for k, name in enumerate(files):
        annotations[k] = (name, 1 + (5 * k) % 4)
    scipy_io.savemat(base / "cars_test_annos_withlabels.mat", {"annotations": annotations.reshape(1, -1)})
    save_pictures([base / "cars_test" / name for name in files], first=20)


def fgvc_aircraft_fixture(folder: Path) -> None:
    """torchvision's FGVCAircraft layout: fgvc-aircraft-2013b/data/variants.txt, images_variant_test.txt ("<id> <variant>")
    and data/images/<id>.jpg."""
    data = folder / "fgvc-aircraft-2013b" / "data"
    variants = ["707-320", "727-200", "A300B4", "Cessna 172", "DC-3"]
    ids = [f"{1000000 + 37 * k}" for k in range(12)]
    save_pictures([data / "images" / f"{i}.jpg" for i in ids], first=30)
    data.joinpath("variants.txt").write_text("".join(f"{v}\n" for v in variants))
    data.joinpath("images_variant_test.txt").write_text("".join(f"{i} {variants[(3 * k) % 5]}\n" for k, i in enumerate(ids)))


def pets_fixture(folder: Path) -> None:
    """torchvision's OxfordIIITPet layout: oxford-iiit-pet/annotations/test.txt ("<breed>_<n> <class> <species> <breed id>",
    1-based) and images/<breed>_<n>.jpg."""
    base = folder / "oxford-iiit-pet"
    breeds = ["Abyssinian", "american_bulldog", "american_pit_bull_terrier", "basset_hound", "Bengal"]
    rows = [(f"{breeds[(2 * k) % 5]}_{100 + k}", 1 + (2 * k) % 5) for k in range(12)]
    save_pictures([base / "images" / f"{image_id}.jpg" for image_id, _ in rows], first=50)
    (base / "annotations" / "trimaps").mkdir(parents=True)
    (base / "annotations" / "test.txt").write_text("".join(f"{i} {c} {1 + c % 2} {c}\n" for i, c in rows))


def gtsrb_fixture(folder: Path) -> None:
    """torchvision's GTSRB layout: gtsrb/GT-final_test.csv (";"-separated, ClassId) and GTSRB/Final_Test/Images/*.ppm."""
    base = folder / "gtsrb"
    files = [f"{k:05d}.ppm" for k in range(12)]
    save_pictures([base / "GTSRB" / "Final_Test" / "Images" / name for name in files], first=60)
    rows = "".join(f"{name};36;28;1;1;30;25;{(11 * k) % 43}\n" for k, name in enumerate(files))
    base.joinpath("GT-final_test.csv").write_text("Filename;Width;Height;Roi.X1;Roi.Y1;Roi.X2;Roi.Y2;ClassId\n" + rows)


def class_folders(base: Path, classes: list[str], count: int, suffix: str = ".jpg", first: int = 0) -> None:
    """ImageFolder's layout: `count` pictures dealt over the class folders in turn (each folder at least one)."""
    save_pictures([base / classes[k % len(classes)] / f"{k:04d}{suffix}" for k in range(max(count, len(classes)))], first=first)


def eurosat_fixture(folder: Path) -> None:
    """torchvision's EuroSAT layout: eurosat/2750/<class>/*.jpg, the release's ten class folders."""
    class_folders(folder / "eurosat" / "2750", ["AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial", "Pasture",
                                                "PermanentCrop", "Residential", "River", "SeaLake"], 14, first=70)


def country211_fixture(folder: Path) -> None:
    """torchvision's Country211 layout: country211/test/<country code>/*.jpg, one folder for each of the 211 countries."""
    codes = sorted({f"{a}{b}" for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for b in "ABCDEFGHIJ"})[:211]
    class_folders(folder / "country211" / "test", codes, 211, first=90)


def renderedsst2_fixture(folder: Path) -> None:
    """torchvision's RenderedSST2 layout: rendered-sst2/test/{negative,positive}/*.png."""
    class_folders(folder / "rendered-sst2" / "test", ["negative", "positive"], 10, suffix=".png", first=110)


def fer2013_fixture(folder: Path) -> None:
    """Kaggle's msambare/fer2013 unpacked, as build_dataset reads it: test/<emotion>/*.jpg (grey 48 x 48)."""
    emotions = ["angry", "disgust", "fear", "happy", "neutral", "sad", "surprise"]
    for k in range(14):
        file = folder / "test" / emotions[k % 7] / f"PrivateTest_{k:05d}.jpg"
        file.parent.mkdir(parents=True, exist_ok=True)
        picture(120 + k, (48, 48)).convert("L").save(file)


def caltech101_fixture(folder: Path) -> None:
    """CLIP_benchmark's Caltech101 layout (torchvision's): caltech101/101_ObjectCategories/<category>/image_%04d.jpg, the
    102 category folders of the release (BACKGROUND_Google kept), pictures in a few of them."""
    from compclip.eval.zeroshot_sources import clip_benchmark_json

    base = folder / "caltech101" / "101_ObjectCategories"
    categories = ["BACKGROUND_Google", "Faces", "Faces_easy", "Leopards", "Motorbikes"] + [
        name.replace(" ", "_") for name in clip_benchmark_json("classnames")["caltech101"][5:]]
    for category in categories:
        (base / category).mkdir(parents=True)
    for k, category in enumerate(sorted(categories)[:6]):
        save_pictures([base / category / f"image_{n:04d}.jpg" for n in range(1, 2 + k % 3)], first=130 + 5 * k)


def objectnet_fixture(folder: Path) -> None:
    """ObjectNet as build_dataset lays it out: objectnet-1.0/images/<folder>/*.png, and the release's mappings/ files copied
    beside objectnet-1.0/ (folder_to_objectnet_label.json, objectnet_to_imagenet_1k.json, pytorch_to_imagenet_2012_id.json,
    imagenet_to_label_2012_v2); a folder ObjectNet does not map to ImageNet is left out."""
    labels = {"air_freshener": "Air freshener", "alarm_clock": "Alarm clock", "banana": "Banana", "bandaid": "Band Aid",
              "basket": "Basket", "beer_bottle": "Beer bottle"}
    imagenet = ["tench, Tinca tinca", "analog clock", "banana", "basket, handbasket", "beer bottle", "digital clock"]
    mapped = {"Alarm clock": "analog clock; digital clock", "Banana": "banana", "Basket": "basket, handbasket",
              "Beer bottle": "beer bottle", "Band Aid": "tench, Tinca tinca"}
    folder.mkdir(parents=True)
    for name, data in (("folder_to_objectnet_label.json", labels), ("objectnet_to_imagenet_1k.json", mapped),
                       ("pytorch_to_imagenet_2012_id.json", {str(k): k for k in range(len(imagenet))})):
        folder.joinpath(name).write_text(json.dumps(data))
    folder.joinpath("imagenet_to_label_2012_v2").write_text("".join(f"{line}\n" for line in imagenet))
    class_folders(folder / "objectnet-1.0" / "images", sorted(labels, reverse=True), 15, suffix=".png", first=150)


def imagenet_sketch_fixture(folder: Path) -> None:
    """ImageNet-Sketch.zip's sketch/ as build_dataset reads it: <wnid>/*.JPEG, ImageNet's first classes."""
    from compclip.eval.zeroshot_sources import clip_benchmark_json

    class_folders(folder, clip_benchmark_json("imagenet_wnids")["imagenet1k"][:6], 14, suffix=".JPEG", first=170)


def imagenetv2_fixture(folder: Path) -> None:
    """ImageNetV2's matched-frequency tar unpacked: ImageNetV2-matched-frequency/<class number>/*.jpeg."""
    save_pictures([folder / "ImageNetV2-matched-frequency" / str((7 * k) % 13) / f"{k}.jpeg" for k in range(14)], first=190)


def pcam_fixture(folder: Path, count: int = 12) -> None:
    """torchvision's PCAM layout: pcam/camelyonpatch_level_2_split_test_x.h5 (`x`, N x 96 x 96 x 3) and _y.h5 (`y`,
    N x 1 x 1 x 1), written with h5py as the release's are."""
    import h5py

    (folder / "pcam").mkdir(parents=True)
    with h5py.File(folder / "pcam" / "camelyonpatch_level_2_split_test_x.h5", "w") as f:
        f["x"] = np.stack([np.asarray(picture(210 + k, (96, 96))) for k in range(count)])
    with h5py.File(folder / "pcam" / "camelyonpatch_level_2_split_test_y.h5", "w") as f:
        f["y"] = np.array([(k * 5) % 3 % 2 for k in range(count)], dtype=np.uint8).reshape(-1, 1, 1, 1)


LAYOUT_FIXTURES = {"stl10": stl10_fixture, "sun397": sun397_fixture, "cars": cars_fixture, "fgvc_aircraft": fgvc_aircraft_fixture,
                   "pets": pets_fixture, "gtsrb": gtsrb_fixture, "eurosat": eurosat_fixture, "country211": country211_fixture,
                   "renderedsst2": renderedsst2_fixture, "fer2013": fer2013_fixture, "caltech101": caltech101_fixture,
                   "objectnet": objectnet_fixture, "imagenet_sketch": imagenet_sketch_fixture, "imagenetv2": imagenetv2_fixture,
                   "pcam": pcam_fixture}
IMAGENET_CLASSES = ("objectnet", "imagenet_sketch", "imagenetv2")  # ImageNet's 80 templates: one keeps the scoring fast


@pytest.mark.parametrize("name", list(LAYOUT_FIXTURES))
def test_each_layout_reads_torchvisions_images_labels_and_classes_and_scores_as_clip_benchmark(clip_benchmark, tiny, tmp_path,
                                                                                                monkeypatch, name):
    import clip_benchmark.datasets.imagenetv2 as imagenetv2
    import torchvision.datasets.stl10

    from compclip.eval.zeroshot_sources import open_source

    if name == "pcam":
        pytest.importorskip("h5py")  # torchvision's PCAM reads HDF5 with it; compclip's lock leaves it out
    monkeypatch.setattr(torchvision.datasets.stl10, "check_integrity", lambda path, md5=None: True)  # not the release, no train files
    monkeypatch.setattr(imagenetv2, "V2_DATASET_SIZE", 14)  # the release holds 10,000: the fixture is the whole set to CLIP_benchmark
    root = tmp_path / "data"
    folder = root / "zeroshot" / name
    LAYOUT_FIXTURES[name](folder)
    options = {"templates": one_template(tmp_path, name)} if name in IMAGENET_CLASSES else {}
    templates = {"custom_template_file": options["templates"]} if options else {}
    dataset, raw = build_theirs(name, folder, tiny, **templates), build_theirs(name, folder, None, **templates)
    source = open_source(folder)
    assert source.classnames == list(dataset.classes) and len(source.images) == len(dataset) > 0
    for k, ref in enumerate(source.images):  # each image's pixels and label in CLIP_benchmark's order, before either preprocess
        image, label = raw[k]
        assert np.array_equal(np.asarray(ref.decode()), np.asarray(image.convert("RGB"))) and source.labels[k] == label, k
    ours = compclip_metrics(tmp_path, root, name, **options)
    assert ours[name]["classes"] == len(dataset.classes) and ours[name]["n"] == len(dataset)
    assert_same(ours[name], reference(tiny, dataset, dataset.classes, dataset.templates))


def test_pcam_without_h5py_is_one_line_naming_the_package_and_its_pip_command(tmp_path, capsys, monkeypatch):
    from compclip.cli import main

    monkeypatch.setitem(sys.modules, "h5py", None)  # not installed: compclip's lock leaves it out
    folder = tmp_path / "data" / "zeroshot" / "pcam"
    (folder / "pcam").mkdir(parents=True)
    for part in ("x", "y"):  # torchvision's PCAM layout: pcam/camelyonpatch_level_2_split_test_{x,y}.h5
        (folder / "pcam" / f"camelyonpatch_level_2_split_test_{part}.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--model", "compclip-tiny-clip", "--benchmark", "zeroshot", "--out", str(tmp_path / "out"),
              "--data-root", str(tmp_path / "data"), "--workers", "0", "--device", "cpu"])
    said = capsys.readouterr()
    assert exit_info.value.code != 0 and "Traceback" not in said.out + said.err
    lines = [line for line in (said.out + said.err).splitlines() if "h5py" in line]
    assert len(lines) == 1 and lines[0].startswith(f"error: {folder}: torchvision's PCAM reads its files with the package h5py")
    assert lines[0].endswith("pip install h5py") and not (tmp_path / "out" / "zeroshot.json").exists()  # stopped: nothing scored


def test_every_class_prompt_reaches_the_text_tower_in_one_pass_with_each_class_weight_unchanged(tiny, tmp_path):
    """Zero-shot's classifier, as `compclip eval --benchmark zeroshot` builds it: the prompts of all classes go to the text
    tower together (a pass a class made the classifier of a few hundred classes a few hundred small passes), and each
    class is still the normalised mean of its own prompts' normalised embeddings, computed here a class at a time."""
    import torch.nn.functional as F

    from compclip.eval import DualEncoderScorer

    model, preprocess, tokenizer = tiny
    files = [tmp_path / f"{k}.png" for k in range(4)]
    save_pictures(files)
    prompts = [[t.format(c=c) for t in TEMPLATES[: 1 + k % 2]] for k, c in enumerate(COLOURS)]  # classes of one and two prompts
    passes = []
    hook = model.token_embedding.register_forward_hook(lambda module, args, out: passes.append(args[0].shape[0]))
    try:
        scores = DualEncoderScorer(model, preprocess, tokenizer, workers=0).class_scores(files, prompts)
    finally:
        hook.remove()
    assert sum(passes) == sum(map(len, prompts)) and len(passes) <= 2  # one pass, or two of similar lengths
    with torch.no_grad():
        weights = torch.stack([F.normalize(F.normalize(model.encode_text(tokenizer(p)), dim=-1).mean(0), dim=0) for p in prompts])
        images = F.normalize(model.encode_image(torch.stack([preprocess(Image.open(f).convert("RGB")) for f in files])), dim=-1)
    assert torch.allclose(scores, images @ weights.T, atol=1e-5)


def see_through(k: int) -> Image.Image:
    """Images whose RGB depends on the rule that makes it: RGBA with an alpha that varies over the picture, a palette
    image with a transparent index, a 16-bit grey whose levels pass 255 (by turns)."""
    image = picture(k)
    if k % 3 == 0:
        alpha = np.tile(np.linspace(0, 255, image.width, dtype=np.uint8), (image.height, 1))
        return Image.merge("RGBA", (*image.split(), Image.fromarray(alpha)))
    if k % 3 == 1:
        palette = image.quantize(8)
        palette.info["transparency"] = int(np.asarray(palette)[0, 0])  # the first pixel's colour see-through
        return palette
    grey = np.asarray(image.convert("L")) * np.linspace(1, 4, image.width)  # PIL clips the right part at 255, not all: no twins
    return Image.fromarray(grey.astype(np.uint16))


def test_see_through_and_16_bit_images_in_clip_benchmarks_layouts_are_its_pixels_and_figures(clip_benchmark, tiny, tmp_path):
    """A wds set and torchvision's RenderedSST2 layout of RGBA, transparent palette and 16-bit grey PNGs: each image's
    pixels are CLIP_benchmark's (its own dataset, no preprocess: PIL's convert('RGB')) and so are the figures; with
    zeroshot.colours=viewer they are compclip's viewer's colours, and the result records the departure."""
    from clip_benchmark.datasets.builder import build_wds_dataset

    from compclip.data.readers import to_rgb
    from compclip.eval import EvalConfig, evaluate
    from compclip.eval.zeroshot_sources import open_source

    root = tmp_path / "data"
    wds = root / "zeroshot" / "wds_colours"
    write_wds(wds, count=18, per_shard=7, image_of=see_through)
    sst2 = root / "zeroshot" / "renderedsst2"
    for k in range(12):
        file = sst2 / "rendered-sst2" / "test" / ("negative", "positive")[k % 2] / f"{k:04d}.png"
        file.parent.mkdir(parents=True, exist_ok=True)
        see_through(k).save(file)
    theirs = {"wds_colours": build_wds_dataset("colours", lambda image: image, data_dir=str(wds)),
              "renderedsst2": build_theirs("renderedsst2", sst2, None)}
    for name, dataset in theirs.items():
        source, images = open_source(root / "zeroshot" / name), [image for image, _ in dataset]
        assert len(source.images) == len(images) > 0
        for k, (ref, image) in enumerate(zip(source.images, images, strict=True)):
            assert np.array_equal(np.asarray(ref.decode()), np.asarray(image.convert("RGB"))), (name, k)
        for ref, image in zip(open_source(root / "zeroshot" / name, "viewer").images, images, strict=True):
            k = int(Path(ref.member or ref.file).stem.lstrip("s"))  # the sample's key or the file's name: its number
            with Image.open(io.BytesIO(encoded(see_through(k), "png"))) as original:  # the viewer's colours, not CLIP_benchmark's
                assert np.array_equal(np.asarray(ref.decode()), np.asarray(to_rgb(original))), (name, k)
            assert not np.array_equal(np.asarray(ref.decode()), np.asarray(image)), (name, k)

    records = {}
    for colours in ("clip_benchmark", "viewer"):
        out = tmp_path / colours
        evaluate(EvalConfig(model="compclip-tiny-clip", benchmark="zeroshot", out=str(out), data_root=str(root), workers=0,
                            device="cpu", precision="fp32", ties="clip_benchmark", bench_options={"zeroshot": {"colours": colours}}))
        records[colours] = json.loads((out / "zeroshot.json").read_text())
    ours = records["clip_benchmark"]["metrics"]
    wds_set = build_wds_dataset("colours", tiny[1], data_dir=str(wds))
    assert_same(ours["wds_colours"], reference(tiny, wds_set.batched(8), wds_set.classes, wds_set.templates, batched=True))
    sst2_set = build_theirs("renderedsst2", sst2, tiny)
    assert_same(ours["renderedsst2"], reference(tiny, sst2_set, sst2_set.classes, sst2_set.templates))
    assert not any("colours" in said for said in records["clip_benchmark"].get("departures", []))
    assert any("zeroshot.colours=viewer" in said for said in records["viewer"]["departures"])
    assert_scored_apart(tmp_path, "zeroshot")


def assert_scored_apart(tmp_path: Path, benchmark: str) -> None:
    """Every item's score in the run under tmp_path/viewer differs from its score under tmp_path/clip_benchmark: the
    option changed each image's pixels, not only what the result says."""
    import pandas as pd

    from compclip.eval.items import SUFFIX

    scores = [pd.read_parquet(tmp_path / colours / f"{benchmark}{SUFFIX}")["score_true"].to_numpy()
              for colours in ("clip_benchmark", "viewer")]
    assert len(scores[0]) == len(scores[1]) > 0 and (scores[0] != scores[1]).all()


def test_one_file_in_two_colour_rules_is_two_images_to_the_memo_the_cache_and_a_sweep(tiny, tmp_path):
    """A see-through PNG made RGB by CLIP_benchmark's rule and by the viewer's is two images: a scorer's memo, its
    embedding cache (written by one scorer, read by the next) and a sweep's decoded pixels each give the second rule the
    embedding it has alone, never the first one's."""
    from compclip.data.images import ImageRef
    from compclip.eval import DualEncoderScorer
    from compclip.eval.pixels import SweepPixels

    file = tmp_path / "see_through.png"
    see_through(0).save(file)
    refs = [ImageRef(file, colours=colours) for colours in ("clip_benchmark", "viewer")]
    model, preprocess, tokenizer = tiny
    alone = [DualEncoderScorer(model, preprocess, tokenizer, workers=0).images([ref])[0] for ref in refs]
    assert not torch.allclose(alone[0], alone[1])
    one = DualEncoderScorer(model, preprocess, tokenizer, workers=0)
    assert torch.equal(one.images(refs), torch.stack(alone))  # the memo
    for first, second in ((refs[0], refs[1]), (refs[1], refs[0])):
        cache = tmp_path / f"cache-{first.colours}"
        DualEncoderScorer(model, preprocess, tokenizer, workers=0, cache_dir=cache).images([first])
        again = DualEncoderScorer(model, preprocess, tokenizer, workers=0, cache_dir=cache).images([second])[0]
        assert torch.equal(again, alone[refs.index(second)]), second.colours  # the embedding cache
    sweep = SweepPixels(tmp_path / "sweep")
    (tmp_path / "sweep").mkdir()
    for ref in refs:  # two models of one preprocessing, each scoring the file in one rule
        scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=0)
        scorer.pixels = sweep.of({"same": "preprocessing"})
        assert torch.equal(scorer.images([ref])[0], alone[refs.index(ref)]), ref.colours
