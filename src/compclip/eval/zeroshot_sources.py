"""Zero-shot classification sets in the layouts CLIP_benchmark 1.6.2 opens (mehdidc/clip_benchmark v1.6.2,
clip_benchmark/datasets/builder.py: `build_wds_dataset`, and `build_dataset` for CIFAR, ImageNet and its variants), each
read in CLIP_benchmark's image order, so that a seeded subset draws the images CLIC's draw does.

Nothing is unpacked: an image inside a tar (a webdataset shard, ImageNet's validation tar) is named by its place in the
tar and read from there when its batch is decoded, so a set of any size holds in memory only its labels, the places of
its images and the batch being decoded. The bundled `clip_benchmark_en_*.json` are CLIP_benchmark's own
`en_classnames.json` and `en_zeroshot_classification_templates.json` (v1.6.2, clip_benchmark/datasets/), and
`clip_benchmark_imagenet_wnids.json` its builder.py's WordNet ids of ImageNet and of the variants it masks.
"""
from __future__ import annotations

import dataclasses
import io
import json
import pickle
import re
import tarfile
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

from ..data.images import ImageRef
from ..data.readers import decode_image
from ..errors import DataError, MissingFileError

ASSETS = Path(__file__).parent / "assets"
WDS_IMAGE_EXTENSIONS = ("webp", "png", "jpg", "jpeg")  # build_wds_dataset's `to_tuple`: the first of these a sample has
IMAGENET_DEVKIT, IMAGENET_VAL_TAR = "ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_img_val.tar"
MASKED_VARIANTS = ("imagenet-a", "imagenet-r", "imagenet-o")  # class folders whose classes are a part of ImageNet's
CIFAR = {"cifar10": ("cifar-10-batches-py", "batches.meta", "label_names", "labels"),
         "cifar100": ("cifar-100-python", "meta", "fine_label_names", "fine_labels")}  # torchvision's CIFAR10/CIFAR100


@cache
def clip_benchmark_json(kind: str) -> dict:
    """CLIP_benchmark's bundled `en_classnames.json` (`classnames`) or templates (`zeroshot_classification_templates`)
    or ImageNet's WordNet ids (`imagenet_wnids`)."""
    name = {"classnames": "clip_benchmark_en_classnames.json", "templates": "clip_benchmark_en_zeroshot_classification_templates.json",
            "imagenet_wnids": "clip_benchmark_imagenet_wnids.json"}[kind]
    return json.loads((ASSETS / name).read_text())


@dataclasses.dataclass(frozen=True)
class TarMemberRef(ImageRef):
    """An image stored uncompressed in a tar: `size` bytes from `offset` of `file`, read when the image is decoded."""

    offset: int = 0
    size: int = 0

    def present(self) -> bool:
        return True

    def decode(self) -> PILImage.Image:
        with open(self.file, "rb") as f:
            f.seek(self.offset)
            return decode_image(f.read(self.size))


@dataclasses.dataclass(frozen=True)
class PixelsRef(ImageRef):
    """A 32x32 RGB image given as its raw pixels (`data`, height x width x channel): a row of CIFAR's pickled batches."""

    def decode(self) -> PILImage.Image:
        return PILImage.fromarray(np.frombuffer(self.data, dtype=np.uint8).reshape(32, 32, 3))


@dataclasses.dataclass
class Source:
    """One dataset as CLIP_benchmark reads it: its images in CLIP_benchmark's order, their labels, and the class names and
    templates the dataset gives itself (None: CLIP_benchmark's bundled JSON gives them), each with where it came from."""

    layout: str
    keys: list[str]  # the names it is looked up by in CLIP_benchmark's JSON, first found wins
    images: list[ImageRef]
    labels: list[int]
    classnames: list[str] | None
    classnames_from: str
    templates: list[str] | None = None
    templates_from: str = ""
    order: str = ""  # the order a subset is drawn over, in words


def open_source(folder: Path) -> Source | None:
    """The dataset in `folder` in the first of CLIP_benchmark's layouts it holds, or None for plain class folders."""
    if (folder / "test" / "nshards.txt").is_file():
        return read_wds(folder)
    if folder.name in CIFAR or any((folder / CIFAR[name][0]).is_dir() for name in CIFAR):
        return read_cifar(folder)
    if (folder / IMAGENET_DEVKIT).is_file():
        return read_imagenet(folder)
    if folder.name in MASKED_VARIANTS:
        return read_masked_variant(folder)
    return None


def wds_type(folder: Path) -> str:
    """`dataset_type.txt`'s word, as build_wds_dataset reads it: classification where the file is absent."""
    file = folder / "dataset_type.txt"
    return file.read_text(encoding="utf-8").strip().lower() if file.is_file() else "classification"


def is_other_task(folder: Path) -> bool:
    """A wds set of another task than classification (`dataset_type.txt`: retrieval)."""
    return (folder / "test" / "nshards.txt").is_file() and wds_type(folder) not in ("classification", "multilabel")


def _text_lines(file: Path) -> list[str] | None:
    """A text file's lines, stripped, as build_wds_dataset's `read_txt(...).splitlines()`; None where it is absent."""
    return [line.strip() for line in file.read_text(encoding="utf-8").splitlines()] if file.is_file() else None


def _samples(shard: Path):
    """A shard's samples as webdataset groups them (`base_plus_ext`, `group_by_keys`): consecutive members sharing the
    name before the first dot of their file name; each (key, {extension: member})."""
    key, parts = None, {}
    try:
        with tarfile.open(shard, "r:") as tar:
            for member in tar:
                match = re.match(r"^((?:.*/|)[^./]+)\.([^/]*)$", member.name) if member.isfile() else None
                if match is None:
                    continue
                if (match.group(1) != key or match.group(2).lower() in parts) and parts:
                    yield key, parts, tar
                    parts = {}
                key = match.group(1)
                parts[match.group(2).lower()] = member
            if parts:
                yield key, parts, tar
    except (tarfile.TarError, OSError) as e:
        raise DataError(f"{shard}: not a readable uncompressed tar ({type(e).__name__}: {e})") from None


def _wds_label(shard: Path, key: str, parts: dict, tar: tarfile.TarFile, classes: int) -> int:
    """A sample's `.cls`, webdataset's integer, checked against the class count."""
    if "cls" not in parts:
        raise DataError(f"{shard}: sample {key!r} has no .cls (its files: {', '.join(sorted(parts))}); a classification "
                        "sample holds one image and its class index")
    text = tar.extractfile(parts["cls"]).read().decode("utf-8", "replace").strip()
    if not re.fullmatch(r"-?\d+", text):
        raise DataError(f"{shard}: sample {key!r}: .cls is {text[:40]!r}, not a class index")
    label = int(text)
    if not 0 <= label < classes:
        raise DataError(f"{shard}: sample {key!r}: .cls {label} is out of range for the {classes} classes of classnames.txt")
    return label


def read_wds(folder: Path) -> Source:
    """A `clip_benchmark_export_wds` set (the Hub's clip-benchmark/wds_<name>): test/{0..n-1}.tar read shard by shard."""
    kind = wds_type(folder)
    if kind != "classification":
        raise DataError(f"{folder / 'dataset_type.txt'}: a {kind} set; zero-shot classification reads classification sets "
                        "(a retrieval set is scored by --benchmark retrieval)")
    count_file = folder / "test" / "nshards.txt"
    count = count_file.read_text(encoding="utf-8").strip()
    if not count.isdigit() or int(count) < 1:
        raise DataError(f"{count_file}: {count[:40]!r} is not a number of shards")
    shards = [folder / "test" / f"{i}.tar" for i in range(int(count))]
    absent = [s.name for s in shards if not s.is_file()]
    if absent:
        raise MissingFileError(f"{folder / 'test'}: nshards.txt lists {count} shards; {len(absent)} absent: {', '.join(absent[:5])}")
    classnames = _text_lines(folder / "classnames.txt")
    if classnames is None:
        raise MissingFileError(f"{folder / 'classnames.txt'}: absent; a classification set names its classes there, one a line")
    images, labels = [], []
    for shard in shards:
        for key, parts, tar in _samples(shard):
            image = next((parts[ext] for ext in WDS_IMAGE_EXTENSIONS if ext in parts), None)
            if image is None:
                raise DataError(f"{shard}: sample {key!r} has no image ({', '.join(WDS_IMAGE_EXTENSIONS)}; its files: "
                                f"{', '.join(sorted(parts))})")
            labels.append(_wds_label(shard, key, parts, tar, len(classnames)))
            images.append(TarMemberRef(shard, member=image.name, offset=image.offset_data, size=image.size))
    templates_file = folder / "zeroshot_classification_templates.txt"
    name = folder.name.removeprefix("wds_")
    return Source("wds", [f"wds/{name}", name], images, labels, classnames, str(folder / "classnames.txt"), _text_lines(templates_file),
                  str(templates_file) if templates_file.is_file() else "", "shards in order, samples in tar order")


def _unpickle(file: Path) -> dict:
    if not file.is_file():
        raise MissingFileError(f"{file}: absent (torchvision's CIFAR layout)")
    try:
        with open(file, "rb") as f:
            return pickle.load(f, encoding="latin1")
    except (pickle.UnpicklingError, EOFError, OSError, ValueError) as e:
        raise DataError(f"{file}: not a CIFAR pickle ({type(e).__name__}: {e})") from None


def read_cifar(folder: Path) -> Source:
    """torchvision's CIFAR10/CIFAR100 (`train=False`, as build_dataset's test split): the pickled `test_batch`/`test`."""
    name = next((n for n in CIFAR if (folder / CIFAR[n][0]).is_dir()), folder.name)
    base, meta_name, names_key, labels_key = CIFAR[name]
    batch_file = folder / base / ("test_batch" if name == "cifar10" else "test")
    meta, batch = _unpickle(folder / base / meta_name), _unpickle(batch_file)
    for record, key in ((meta, names_key), (batch, "data"), (batch, labels_key)):
        if key not in record:
            raise DataError(f"{batch_file if record is batch else folder / base / meta_name}: no field {key!r}")
    classnames, labels = list(meta[names_key]), [int(v) for v in batch[labels_key]]
    pixels = np.asarray(batch["data"], dtype=np.uint8)
    if pixels.ndim != 2 or pixels.shape[1] != 3 * 32 * 32 or len(pixels) != len(labels):
        raise DataError(f"{batch_file}: 'data' is {pixels.shape}, expected ({len(labels)}, 3072) for {len(labels)} labels")
    wrong = next((k for k, v in enumerate(labels) if not 0 <= v < len(classnames)), None)
    if wrong is not None:
        raise DataError(f"{batch_file}: record {wrong}: label {labels[wrong]} is out of range for the {len(classnames)} classes")
    rows = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # torchvision's CIFAR10.__init__
    images = [PixelsRef(batch_file, member=f"record {k}", data=row.tobytes()) for k, row in enumerate(rows)]
    return Source(name, [name], images, labels, classnames, f"{folder / base / meta_name} ({names_key}, torchvision's classes)",
                  order="the records of the test batch in order")


def _imagenet_devkit(devkit: Path) -> tuple[list[str], list[str]]:
    """The devkit's leaf synsets' WordNet ids in ILSVRC2012_ID order and each validation image's (sorted names) WordNet id:
    torchvision's `parse_meta_mat` and `parse_val_groundtruth_txt`, read from the tar.gz without unpacking it."""
    from scipy import io as scipy_io

    try:
        with tarfile.open(devkit, "r:gz") as tar:
            meta = scipy_io.loadmat(io.BytesIO(tar.extractfile("ILSVRC2012_devkit_t12/data/meta.mat").read()), squeeze_me=True)
            truth = tar.extractfile("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt").read().decode().split()
    except (tarfile.TarError, KeyError, OSError, ValueError, AttributeError) as e:
        raise DataError(f"{devkit}: not ImageNet's devkit ({type(e).__name__}: {e})") from None
    synsets = [s for s in meta["synsets"] if s[4] == 0]  # leaves: num_children 0
    wnid_of = {int(s[0]): str(s[1]) for s in synsets}
    bad = next((v for v in truth if int(v) not in wnid_of), None)
    if bad is not None:
        raise DataError(f"{devkit}: ILSVRC2012_validation_ground_truth.txt names ILSVRC2012_ID {bad}, not a leaf synset of meta.mat")
    return sorted(wnid_of.values()), [wnid_of[int(v)] for v in truth]


def read_imagenet(folder: Path) -> Source:
    """torchvision's ImageNet (`split="val"`, as build_dataset's test split): the devkit and the validation tar, read in the
    order torchvision's ImageFolder over the unpacked `val/` reads it (WordNet id, then file name)."""
    wnids, truth = _imagenet_devkit(folder / IMAGENET_DEVKIT)
    val_tar = folder / IMAGENET_VAL_TAR
    if not val_tar.is_file():
        raise MissingFileError(f"{val_tar}: absent; torchvision's ImageNet reads the validation set from it")
    members = sorted((m for _, parts, _ in _samples(val_tar) for m in parts.values()), key=lambda m: m.name)
    if len(members) != len(truth):
        raise DataError(f"{val_tar}: {len(members)} images, but the devkit's ground truth labels {len(truth)}")
    index = {w: k for k, w in enumerate(wnids)}
    ordered = sorted(zip(truth, members, strict=True), key=lambda pair: (pair[0], Path(pair[1].name).name))
    images = [TarMemberRef(val_tar, member=m.name, offset=m.offset_data, size=m.size) for _, m in ordered]
    return Source("imagenet1k", ["imagenet1k"], images, [index[w] for w, _ in ordered], clip_benchmark_json("classnames")["imagenet1k"],
                  "CLIP_benchmark's en_classnames.json[imagenet1k]", order="WordNet ids, then file names")


def read_masked_variant(folder: Path) -> Source:
    """ImageNet-A, -R or -O: class folders named by WordNet id, their class names ImageNet's masked to the variant's
    200 classes as build_dataset masks them; each folder's label its id's place among the variant's classes."""
    wnids = clip_benchmark_json("imagenet_wnids")
    kept = set(wnids[folder.name])
    mask = [w in kept for w in wnids["imagenet1k"]]
    variant = [w for w, keep in zip(wnids["imagenet1k"], mask, strict=True) if keep]
    names = [n for n, keep in zip(clip_benchmark_json("classnames")["imagenet1k"], mask, strict=True) if keep]
    index = {w: k for k, w in enumerate(variant)}
    folders = sorted(p for p in folder.iterdir() if p.is_dir())
    stray = [p.name for p in folders if p.name not in index]
    if stray:
        raise DataError(f"{folder}: class folders {stray[:5]} are not WordNet ids of {folder.name}'s {len(variant)} classes")
    images, labels = [], []
    for class_folder in folders:
        for file in sorted(class_folder.iterdir()):
            if file.is_file() and file.suffix.lower() in {".jpg", ".jpeg", ".png", ".webp", ".bmp"}:
                images.append(ImageRef(file))
                labels.append(index[class_folder.name])
    return Source(folder.name, [folder.name], images, labels, names, f"CLIP_benchmark's en_classnames.json[imagenet1k], masked to "
                  f"{folder.name}'s classes", order="class folders, then file names")
