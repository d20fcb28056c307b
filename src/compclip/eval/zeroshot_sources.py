"""Zero-shot classification sets in the layouts CLIP_benchmark 1.6.2 opens (mehdidc/clip_benchmark v1.6.2,
clip_benchmark/datasets/builder.py: `build_wds_dataset`, and `build_dataset` for CIFAR, ImageNet and its variants, the
torchvision datasets it opens through torchvision's own classes, Caltech101, ObjectNet and VOC2007), each read in
CLIP_benchmark's image order, so that a seeded subset draws the images CLIC's draw does.

Nothing is unpacked: an image inside a tar (a webdataset shard, ImageNet's validation tar) is named by its place in the
tar and read from there when its batch is decoded, so a set of any size holds in memory only its labels, the places of
its images and the batch being decoded. The bundled `clip_benchmark_en_*.json` are CLIP_benchmark's own
`en_classnames.json` and `en_zeroshot_classification_templates.json` (v1.6.2, clip_benchmark/datasets/), and
`clip_benchmark_imagenet_wnids.json` its builder.py's WordNet ids of ImageNet and of the variants it masks.

Each image becomes RGB as CLIP_benchmark makes it (PIL's `convert("RGB")`: torchvision's `default_loader`, webdataset's
"pil" decoding, open_clip's `_convert_to_rgb`), unless `LayoutColours.colours` asks for compclip's viewer's colours.
"""
from __future__ import annotations

import dataclasses
import importlib
import io
import json
import pickle
import re
import tarfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import ClassVar

import numpy as np
from PIL import Image as PILImage

from ..data.images import ImageRef
from ..data.readers import RGB_RULES, decode_image
from ..errors import DataError, MissingFileError, UsageError
from ..options import option
from .base import noted

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
class LayoutColours:
    """How the images of CLIP_benchmark's layouts become RGB, one option of each benchmark that reads them (zero-shot
    classification, and retrieval's wds sets): by default as CLIP_benchmark makes them, so that its figures are met.
    `benchmark`: the name of the benchmark whose options these are, as `--bench-opt` spells it."""

    benchmark: ClassVar[str] = ""
    colours: str = option("clip_benchmark", "how images in CLIP_benchmark's layouts become RGB: clip_benchmark (PIL's "
                                            "convert('RGB'), as CLIP_benchmark reads them: alpha dropped, 16-bit greys "
                                            "clipped) or viewer (compclip's: transparency over white, 16-bit greys rescaled)")

    def __post_init__(self):
        if self.colours not in RGB_RULES:
            raise UsageError(f"--bench-opt {self.benchmark}.colours must be one of {', '.join(RGB_RULES)}, not {self.colours!r}")

    def colours_departures(self) -> list[str]:
        """The sentence a run in compclip's viewer's colours records: its images are not CLIP_benchmark's pixels."""
        if self.colours == "clip_benchmark":
            return []
        return [f"images in CLIP_benchmark's layouts are made RGB in compclip's viewer's colours (transparency over white, "
                f"16-bit greys rescaled), not by PIL's convert('RGB') as CLIP_benchmark reads them "
                f"(--bench-opt {self.benchmark}.colours={self.colours})"]


def in_colours(images: list[ImageRef], colours: str) -> list[ImageRef]:
    """`images` made RGB by the rule `colours` names (`RGB_RULES`)."""
    return [ref if ref.colours == colours else dataclasses.replace(ref, colours=colours) for ref in images]


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
            return decode_image(f.read(self.size), self.colours)


@dataclasses.dataclass(frozen=True)
class PixelsRef(ImageRef):
    """An image given as its raw 8-bit pixels (`data`, height x width [x channel]): a row of CIFAR's pickled batches,
    of STL10's or MNIST's binary files, as torchvision's classes hold them in memory."""

    shape: tuple[int, ...] = (32, 32, 3)

    def decode(self) -> PILImage.Image:
        return PILImage.fromarray(np.frombuffer(self.data, dtype=np.uint8).reshape(self.shape)).convert("RGB")


@dataclasses.dataclass(frozen=True)
class CropRef(ImageRef):
    """The part `box` (left, top, right, bottom) of an image file: VOC2007's objects, one crop a bounding box."""

    box: tuple[int, int, int, int] = (0, 0, 0, 0)

    def present(self) -> bool:
        return self.file.is_file()

    def decode(self) -> PILImage.Image:
        return decode_image(self.file, self.colours).crop(self.box)


@dataclasses.dataclass(frozen=True)
class HDF5RowRef(ImageRef):
    """Row `row` of dataset `x` of an HDF5 file (PCAM's camelyonpatch_level_2_split_test_x.h5), read when decoded."""

    row: int = 0

    def present(self) -> bool:
        return self.file.is_file()

    def decode(self) -> PILImage.Image:
        import h5py

        with h5py.File(self.file, "r") as f:
            return PILImage.fromarray(np.asarray(f["x"][self.row], dtype=np.uint8)).convert("RGB")


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
    multilabel: list[tuple[int, ...]] | None = None  # each image's classes where it has several (VOC2007's multi-label)
    absent: dict[str, str] = dataclasses.field(default_factory=dict)  # what the release holds and this copy lacks: why


def open_source(folder: Path, colours: str = "clip_benchmark") -> Source | None:
    """The dataset in `folder` in the first of CLIP_benchmark's layouts it holds, its images made RGB by the rule
    `colours` names (CLIP_benchmark's by default), or None for plain class folders."""
    source = _layout_source(folder)
    if source is not None:
        source.images = in_colours(source.images, colours)
    return source


def _layout_source(folder: Path) -> Source | None:
    if (folder / "test" / "nshards.txt").is_file():
        return read_wds(folder)
    if folder.name in CIFAR or any((folder / CIFAR[name][0]).is_dir() for name in CIFAR):
        return read_cifar(folder)
    if (folder / IMAGENET_DEVKIT).is_file():
        return read_imagenet(folder)
    if folder.name in MASKED_VARIANTS or folder.name == "imagenet_sketch":
        return read_masked_variant(folder)
    readers = {**dict.fromkeys(TORCHVISION, read_torchvision), "caltech101": read_caltech101, "imagenetv2": read_imagenetv2,
               "objectnet": read_objectnet, "voc2007": read_voc2007, "voc2007_multilabel": read_voc2007}
    return readers[folder.name](folder) if folder.name in readers else None


def wds_type(folder: Path) -> str:
    """`dataset_type.txt`'s word, as build_wds_dataset reads it: classification where the file is absent."""
    file = folder / "dataset_type.txt"
    return noted(file).read_text(encoding="utf-8").strip().lower() if file.is_file() else "classification"


def is_other_task(folder: Path) -> bool:
    """A wds set of another task than classification (`dataset_type.txt`: retrieval)."""
    return (folder / "test" / "nshards.txt").is_file() and wds_type(folder) not in ("classification", "multilabel")


def _text_lines(file: Path) -> list[str] | None:
    """A text file's lines, stripped, as build_wds_dataset's `read_txt(...).splitlines()`; None where it is absent."""
    return [line.strip() for line in noted(file).read_text(encoding="utf-8").splitlines()] if file.is_file() else None


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
    count = noted(count_file).read_text(encoding="utf-8").strip()
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
    200 classes as build_dataset masks them; each folder's label its id's place among the variant's classes.
    ImageNet-Sketch (`sketch/` of ImageNet-Sketch.zip): the same, unmasked, ImageNet's 1,000 classes."""
    wnids = clip_benchmark_json("imagenet_wnids")
    kept = set(wnids["imagenet1k" if folder.name == "imagenet_sketch" else folder.name])
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


def _paths(attribute: str):
    """A torchvision dataset's images as (file, label) pairs it holds in `attribute` (ImageFolder's `samples`)."""
    return lambda ds, root: ([ImageRef(Path(p)) for p, _ in getattr(ds, attribute)], [int(y) for _, y in getattr(ds, attribute)])


def _files(attribute: str):
    """A torchvision dataset's images as its file list `attribute` and its `_labels`."""
    return lambda ds, root: ([ImageRef(Path(p)) for p in getattr(ds, attribute)], [int(y) for y in ds._labels])


def _pixel_rows(file: Path, rows: np.ndarray) -> list[PixelsRef]:
    return [PixelsRef(file, member=f"record {k}", data=row.tobytes(), shape=row.shape) for k, row in enumerate(rows)]


def _stl10(ds, root: Path):
    """STL10's test_X.bin as torchvision holds it (N x channel x 96 x 96), each row turned as its `__getitem__` turns it."""
    file = Path(ds.root) / ds.base_folder / ds.test_list[0][0]
    return _pixel_rows(file, np.ascontiguousarray(np.asarray(ds.data).transpose(0, 2, 3, 1))), [int(y) for y in ds.labels]


def _mnist(ds, root: Path):
    """MNIST's t10k images as torchvision holds them (N x 28 x 28 grey levels)."""
    return _pixel_rows(Path(ds.raw_folder) / "t10k-images-idx3-ubyte", ds.data.numpy()), [int(y) for y in ds.targets]


def _pcam(ds, root: Path):
    """PCAM's test HDF5 files: each image a row of `x`, read when decoded; the labels `y[:, 0, 0, 0]`, as its `__getitem__`."""
    import h5py

    images, targets = (ds._base_folder / ds._FILES["test"][kind][0] for kind in ("images", "targets"))
    with h5py.File(targets, "r") as f:
        labels = [int(y) for y in np.asarray(f["y"])[:, 0, 0, 0]]
    return [HDF5RowRef(images, member=f"row {k}", row=k) for k in range(len(labels))], labels


@dataclasses.dataclass(frozen=True)
class TorchvisionLayout:
    """A dataset build_dataset opens through a torchvision class: the class, the arguments build_dataset gives it for
    the test split (besides root, transform and download=False), how its object holds images and labels, and where the
    class names come from: torchvision's `classes` (with `spaced` characters read as spaces, as build_dataset does) or
    CLIP_benchmark's en_classnames.json (`classnames="clip_benchmark"`)."""

    cls: str
    arguments: dict
    samples: Callable
    classnames: str = "torchvision"
    spaced: str = ""
    subfolder: str = ""  # fer2013: build_dataset's ImageFolder reads root/test
    needs: str = ""  # a package the class imports that compclip's lock leaves out (pcam: h5py)


TORCHVISION = {
    "stl10": TorchvisionLayout("STL10", {"split": "test"}, _stl10),
    "mnist": TorchvisionLayout("MNIST", {"train": False}, _mnist, "clip_benchmark"),
    "food101": TorchvisionLayout("Food101", {"split": "test"}, _files("_image_files"), spaced="_"),
    "sun397": TorchvisionLayout("SUN397", {}, _files("_image_files"), spaced="_/"),
    "cars": TorchvisionLayout("StanfordCars", {"split": "test"}, _paths("_samples")),
    "fgvc_aircraft": TorchvisionLayout("FGVCAircraft", {"annotation_level": "variant", "split": "test"}, _files("_image_files")),
    "dtd": TorchvisionLayout("DTD", {"split": "test"}, _files("_image_files")),
    "pets": TorchvisionLayout("OxfordIIITPet", {"split": "test", "target_types": "category"}, _files("_images")),
    "flowers": TorchvisionLayout("Flowers102", {"split": "test"}, _files("_image_files"), "clip_benchmark"),
    "gtsrb": TorchvisionLayout("GTSRB", {"split": "test"}, _paths("_samples"), "clip_benchmark"),
    "eurosat": TorchvisionLayout("EuroSAT", {}, _paths("samples"), "clip_benchmark"),
    "country211": TorchvisionLayout("Country211", {"split": "test"}, _paths("samples"), "clip_benchmark"),
    "pcam": TorchvisionLayout("PCAM", {"split": "test"}, _pcam, "clip_benchmark", needs="h5py"),
    "renderedsst2": TorchvisionLayout("RenderedSST2", {"split": "test"}, _paths("_samples")),
    "fer2013": TorchvisionLayout("ImageFolder", {}, _paths("samples"), "clip_benchmark", subfolder="test"),
}


def _require_package(root: Path, layout: TorchvisionLayout) -> None:
    """The package `layout.needs` importable, or one line naming it and its pip command: torchvision's own refusal (a
    RuntimeError, as for absent files) would otherwise read as files missing."""
    if not layout.needs:
        return
    try:
        importlib.import_module(layout.needs)
    except ImportError:
        raise UsageError(f"{root}: torchvision's {layout.cls} reads its files with the package {layout.needs}, which is not "
                         f"installed (compclip does not require it): pip install {layout.needs}") from None


def _torchvision_dataset(folder: Path, layout: TorchvisionLayout):
    """torchvision's dataset object over `folder`, built as build_dataset builds it but never downloading; its refusal
    (files absent, a checksum that differs from the release's) one line naming the folder."""
    import torchvision.datasets

    root = folder / layout.subfolder
    _require_package(root, layout)
    extra = {} if layout.cls == "ImageFolder" else {"download": False}
    try:
        return getattr(torchvision.datasets, layout.cls)(root=str(root), transform=None, **layout.arguments, **extra)
    except RuntimeError as e:  # torchvision's "Dataset not found or corrupted. You can use download=True to download it"
        raise MissingFileError(f"{root}: torchvision's {layout.cls} does not find its files there ({e}); docs/data.md lists "
                               "the files each layout reads") from None
    except FileNotFoundError as e:
        raise MissingFileError(f"{e.filename}: absent; torchvision's {layout.cls} reads it under {root}") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise DataError(f"{root}: torchvision's {layout.cls} cannot read it ({type(e).__name__}: {e})") from None


def _check_labels(where: Path, labels: list[int], classes: int) -> None:
    wrong = next((k for k, v in enumerate(labels) if not 0 <= v < classes), None)
    if wrong is not None:
        raise DataError(f"{where}: record {wrong}: label {labels[wrong]} is out of range for the {classes} classes")


def _bundled_classnames(name: str, folder: Path, count: int | None = None) -> list[str]:
    """CLIP_benchmark's en_classnames.json[name], checked against the number of classes the files hold."""
    names = clip_benchmark_json("classnames")[name]
    if count is not None and count != len(names):
        raise DataError(f"{folder}: {count} classes, but CLIP_benchmark's en_classnames.json[{name}] names {len(names)}")
    return names


def read_torchvision(folder: Path) -> Source:
    """A dataset in the layout of the torchvision class build_dataset opens it with (`TORCHVISION`): read by that class,
    its images handed to the decoder as files (or, for the classes that load their arrays, as pixel rows)."""
    name, layout = folder.name, TORCHVISION[folder.name]
    dataset = _torchvision_dataset(folder, layout)
    try:
        images, labels = layout.samples(dataset, folder)
    except (OSError, ValueError, KeyError, IndexError) as e:
        raise DataError(f"{folder}: torchvision's {layout.cls} holds no readable images and labels ({type(e).__name__}: {e})") from None
    own = [str(c) for c in getattr(dataset, "classes", [])]
    if layout.classnames == "clip_benchmark":
        classnames = _bundled_classnames(name, folder, len(own) or None)
        names_from = f"CLIP_benchmark's en_classnames.json[{name}]"
    else:
        classnames = [c.translate({ord(ch): " " for ch in layout.spaced}) for c in own]
        names_from = f"torchvision's {layout.cls}.classes" + (f" ({' and '.join(layout.spaced)} read as spaces)" if layout.spaced else "")
    _check_labels(folder, labels, len(classnames))
    return Source(name, [name], images, labels, classnames, names_from, order=f"torchvision's {layout.cls} order")


def read_caltech101(folder: Path) -> Source:
    """CLIP_benchmark's own Caltech101 (datasets/caltech101.py, the background class kept): the category folders of
    caltech101/101_ObjectCategories in sorted order (its root is `<root>/caltech101`, as torchvision's), each one's
    `image_0001.jpg` up to its count of .jpg files."""
    base = folder / "caltech101" / "101_ObjectCategories"
    if not base.is_dir():
        raise MissingFileError(f"{base}: absent; CLIP_benchmark's Caltech101 reads its category folders there "
                               "(101_ObjectCategories.tar.gz unpacked into caltech101/)")
    categories = sorted(p.name for p in base.iterdir())
    classnames = _bundled_classnames("caltech101", folder, len(categories))
    images, labels = [], []
    for label, category in enumerate(categories):
        count = len(list((base / category).glob("*.jpg")))
        images += [ImageRef(base / category / f"image_{k:04d}.jpg") for k in range(1, count + 1)]
        labels += [label] * count
    return Source("caltech101", ["caltech101"], images, labels, classnames, "CLIP_benchmark's en_classnames.json[caltech101]",
                  order="category folders, then image numbers")


IMAGENETV2_FOLDER, IMAGENETV2_SIZE = "ImageNetV2-matched-frequency", 10_000  # CLIP_benchmark's imagenetv2.py


def read_imagenetv2(folder: Path) -> Source:
    """CLIP_benchmark's ImageNetV2Dataset (matched-frequency): ImageNetV2-matched-frequency/**/*.jpeg in the order the
    file system lists them (as its `glob`), each labelled by its folder's number; ImageNet's class names."""
    base = folder / IMAGENETV2_FOLDER
    if not base.is_dir():
        raise MissingFileError(f"{base}: absent; CLIP_benchmark reads ImageNetV2 (matched-frequency) there, unpacked")
    files = list(base.glob("**/*.jpeg"))
    stray = next((f for f in files if not f.parent.name.isdigit() or not 0 <= int(f.parent.name) < 1000), None)
    if stray is not None:
        raise DataError(f"{stray}: its folder {stray.parent.name!r} is not a class number 0-999")
    absent = {} if len(files) == IMAGENETV2_SIZE else {
        str(base): f"{len(files):,} images of the release's {IMAGENETV2_SIZE:,} (CLIP_benchmark downloads the set again then)"}
    return Source("imagenetv2", ["imagenetv2"], [ImageRef(f) for f in files], [int(f.parent.name) for f in files],
                  clip_benchmark_json("classnames")["imagenet1k"], "CLIP_benchmark's en_classnames.json[imagenet1k]",
                  order="the file system's order of **/*.jpeg", absent=absent)


def _json_file(file: Path) -> dict:
    if not file.is_file():
        raise MissingFileError(f"{file}: absent; ObjectNet's mappings/ files go beside objectnet-1.0/")
    try:
        return json.loads(noted(file).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{file}: not JSON ({e})") from None


def read_objectnet(folder: Path) -> Source:
    """CLIP_benchmark's ObjectNetDataset: objectnet-1.0/images/<folder> as torchvision's ImageFolder reads it, kept to the
    folders of the 113 classes objectnet_to_imagenet_1k.json maps to ImageNet; each labelled by its folder's place
    among those folders sorted, its class name ObjectNet's, lower-cased."""
    from torchvision.datasets import ImageFolder

    to_label = _json_file(folder / "folder_to_objectnet_label.json")
    mapped = _json_file(folder / "objectnet_to_imagenet_1k.json")
    folder_of = {label: name for name, label in to_label.items()}
    lacking = [label for label in mapped if label not in folder_of]
    if lacking:
        raise DataError(f"{folder / 'objectnet_to_imagenet_1k.json'}: classes {lacking[:5]} have no folder in "
                        "folder_to_objectnet_label.json")
    kept = sorted(folder_of[label] for label in mapped)
    index = {name: k for k, name in enumerate(kept)}
    images_root = folder / "objectnet-1.0" / "images"
    try:
        samples = ImageFolder(str(images_root)).samples
    except (FileNotFoundError, OSError) as e:
        raise MissingFileError(f"{images_root}: no ObjectNet images ({e})") from None
    samples = [(p, Path(p).parent.name) for p, _ in samples if Path(p).parent.name in index]
    return Source("objectnet", ["objectnet"], [ImageRef(Path(p)) for p, _ in samples], [index[c] for _, c in samples],
                  [to_label[c].lower() for c in kept], f"{folder / 'folder_to_objectnet_label.json'} (lower-cased)",
                  order="class folders, then file names")


VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable", "dog", "horse",
               "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")  # CLIP_benchmark's voc2007.py


def _voc_objects(folder: Path) -> tuple[list[str], list[tuple[str, tuple[int, int, int, int], int]]]:
    """VOC2007's test images (ImageSets/Main/aeroplane_test.txt, in order) and each one's objects (name, bndbox) from
    Annotations/<id>.xml, as CLIP_benchmark's `read_split` and `read_bndbox` read them."""
    import xml.etree.ElementTree as ElementTree

    base = folder / "VOCdevkit" / "VOC2007"
    split = base / "ImageSets" / "Main" / f"{VOC_CLASSES[0]}_test.txt"
    if not split.is_file():
        raise MissingFileError(f"{split}: absent; VOC2007's test set (VOCtest_06-Nov-2007.tar unpacked into {folder})")
    ids = [line.split()[0] for line in noted(split).read_text(encoding="utf-8").splitlines() if line.strip()]
    objects = []
    for image_id in ids:
        xml = base / "Annotations" / f"{image_id}.xml"
        try:
            tree = ElementTree.parse(xml)
            for obj in tree.findall("object"):
                name, box = obj.findtext("name"), obj.find("bndbox")
                if name not in VOC_CLASSES:
                    raise ValueError(f"object {name!r} is not one of VOC's 20 classes")
                corners = tuple(int(box.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
                objects.append((image_id, corners, VOC_CLASSES.index(name)))
        except (OSError, ElementTree.ParseError, ValueError, TypeError, AttributeError) as e:
            raise DataError(f"{xml}: not a VOC annotation ({type(e).__name__}: {e})") from None
    return ids, objects


def read_voc2007(folder: Path) -> Source:
    """VOC2007's test set as CLIP_benchmark reads it: `voc2007` one image per object, cropped to its box, labelled by its
    class (PASCALVoc2007Cropped); `voc2007_multilabel` each image whole with every class it holds (PASCALVoc2007)."""
    ids, objects = _voc_objects(folder)
    jpegs = folder / "VOCdevkit" / "VOC2007" / "JPEGImages"
    names_from = "CLIP_benchmark's voc2007.py (object_categories)"
    if folder.name == "voc2007":
        images = [CropRef(jpegs / f"{image_id}.jpg", member=f"box {box}", box=box) for image_id, box, _ in objects]
        return Source("voc2007", ["voc2007"], images, [c for _, _, c in objects], list(VOC_CLASSES), names_from,
                      order="test images in aeroplane_test.txt's order, then objects in annotation order")
    classes = {image_id: set() for image_id in ids}
    for image_id, _, c in objects:
        classes[image_id].add(c)
    multilabel = [tuple(sorted(classes[i])) for i in ids]
    return Source("voc2007_multilabel", ["voc2007_multilabel"], [ImageRef(jpegs / f"{i}.jpg") for i in ids],
                  [c[0] if c else 0 for c in multilabel], list(VOC_CLASSES), names_from, order="aeroplane_test.txt's order",
                  multilabel=multilabel)
