"""compclip's benchmark rules against the official code, on the same scores.

Give it a clone of an official repository (`--repo PATH`); it recognises:
- github.com/amitakamath/whatsup_vlms: What'sUp's `Controlled_Images`, `COCO_QA`, `VG_QA` and their `evaluate_scores`
  (accuracy, per preposition, pair and set accuracy);
- github.com/mertyg/vision-language-models-are-bows: ARO's `VG_Relation` and `VG_Attribution.evaluate_scores`, then the
  macro accuracies of `notebooks/Replicate ARO! ...ipynb` (its `symmetric` list is read from the notebook);
- github.com/om-ai-lab/VL-CheckList: `vl_checklist.evaluate.Evaluate` (ITC) per corpus entry and `radar.generate_chart`'s
  13 sub-dimensions (its averaging lines, run up to where it draws), and compclip's corpus table against corpus.json and
  the corpus yamls.

It writes a small data set in the benchmark's official layout (solid-colour images, captions from a colour and object
vocabulary; `--work DIR` keeps it), scores it with a compclip model (default compclip-tiny-clip, seeded weights), runs
compclip's benchmark and the official scoring on those same scores, prints both side by side and exits 1 when a figure
differs. ARO's order sets are not compared: their perturbations need NLTK's tokenizer data, a separate download.

Run: .venv/bin/python benchmarks/eval_vs_official.py --repo ~/src/whatsup_vlms [--model compclip-tiny-clip] [--work DIR]
"""
import argparse
import ast
import contextlib
import inspect
import io
import json
import os
import random
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
from PIL import Image

from compclip.eval import REGISTRY, DualEncoderScorer
from compclip.models import load_model

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (40, 60, 220), "yellow": (230, 220, 40), "white": (240, 240, 240)}
OBJECTS = ("mug", "plate", "cup", "table", "box", "chair", "dog", "cat")


def picture(path: Path, rng: random.Random) -> None:
    """A solid image of a random colour with a square of another: content the model's scores depend on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    a, b = rng.sample(list(COLOURS.values()), 2)
    image = Image.new("RGB", (48, 40), a)
    image.paste(b, (rng.randrange(24), rng.randrange(20), rng.randrange(24, 48), rng.randrange(20, 40)))
    image.save(path)


def phrase(rng: random.Random) -> str:
    return f"a {rng.choice(list(COLOURS))} {rng.choice(OBJECTS)}"


def report(rows: list[tuple[str, float, float]], tolerance: float = 1e-9) -> bool:
    """Print (figure, official, compclip) rows; True when every pair agrees."""
    print(f"{'figure':44s} {'official':>10s} {'compclip':>10s}")
    same = True
    for name, theirs, ours in rows:
        agree = abs(theirs - ours) <= tolerance
        same &= agree
        print(f"{name:44s} {theirs:10.4f} {ours:10.4f}{'' if agree else '   <- differs'}")
    return same


@contextlib.contextmanager
def official(repo: Path):
    """The repository's packages importable (its `easydict` import, used only when items are loaded, met by a dict)."""
    sys.path.insert(0, str(repo))
    if "easydict" not in sys.modules:
        try:
            import easydict  # noqa: F401
        except ImportError:
            sys.modules["easydict"] = types.SimpleNamespace(EasyDict=dict)
    try:
        yield
    finally:
        sys.path.remove(str(repo))


def printed(fn, *args):
    """fn(*args) and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        value = fn(*args)
    return value, out.getvalue()


# ---- What'sUp ----------------------------------------------------------------------------------------------------


def whatsup_data(root: Path, rng: random.Random) -> None:
    base = root / "whatsup"
    controlled = (("controlled_images_dataset.json", "controlled_images", ("left_of", "right_of", "on", "under")),
                  ("controlled_clevr_dataset.json", "controlled_clevr", ("left_of", "right_of", "in-front_of", "behind")))
    words = lambda relation: relation.replace("_", " ").replace("-", " ")  # noqa: E731  (the captions say "in front of")
    for file, folder, relations in controlled:
        records = []
        for a, b in [(a, b) for a in OBJECTS for b in OBJECTS if a < b][:12]:
            for relation in relations:
                name = f"{a}_{relation}_{b}.jpeg"
                picture(base / folder / name, rng)
                options = [f"{phrase(rng)} {words(r)} a {b}" for r in (relation, *(r for r in relations if r != relation))]
                records.append({"image_path": f"data/{folder}/{name}", "caption_options": options})
        (base / file).write_text(json.dumps(records))
    for file, folder, relations in (("coco_qa_one_obj.json", "val2017", ("left", "right", "top", "bottom")),
                                    ("coco_qa_two_obj.json", "val2017", ("to the left of", "to the right of", "above", "below")),
                                    ("vg_qa_one_obj.json", "vg_images", ("left", "right", "top", "bottom")),
                                    ("vg_qa_two_obj.json", "vg_images", ("to the left of", "to the right of", "in front of", "behind"))):
        records = []
        for k in range(24):
            image_id = 1000 + len(file) * 100 + k
            name = f"{image_id:012d}.jpg" if folder == "val2017" else f"{image_id}.jpg"
            picture(base / folder / name, rng)
            true, false = rng.sample(relations, 2)
            caption = (lambda r: f"{phrase(rng)} on the {r}") if "one" in file else (lambda r: f"{phrase(rng)} {r} {phrase(rng)}")
            records.append([image_id, caption(true), caption(false)])
        (base / file).write_text(json.dumps(records))


def compare_whatsup(repo: Path, root: Path, scorer) -> bool:
    bench = REGISTRY["whatsup"]
    ours = bench.run(scorer, root, bench.ties).metrics
    rows = []
    with official(repo):
        from dataset_zoo.aro_datasets import COCO_QA, VG_QA, Controlled_Images

        datasets = {"controlled_a": lambda: Controlled_Images(None, root_dir=str(root / "whatsup"), subset="A"),
                    "controlled_b": lambda: Controlled_Images(None, root_dir=str(root / "whatsup"), subset="B"),
                    "coco_one_obj": lambda: COCO_QA(None, root_dir=str(root / "whatsup"), subset="one"),
                    "coco_two_obj": lambda: COCO_QA(None, root_dir=str(root / "whatsup"), subset="two"),
                    "gqa_one_obj": lambda: VG_QA(None, root_dir=str(root / "whatsup"), subset="one"),
                    "gqa_two_obj": lambda: VG_QA(None, root_dir=str(root / "whatsup"), subset="two")}
        for split, make in datasets.items():
            examples = bench.examples(root, split)  # compclip's images and options, in the file's order
            scores = np.stack([scorer.pairs([image] * len(options), options).numpy()[None] for image, options, _ in examples])
            records, text = printed(make().evaluate_scores, scores)  # N x 1 x options
            lines = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
            accuracy = float(text.splitlines()[0].removeprefix("Individual accuracy: ")) / 100  # what evaluate_scores prints first
            rows.append((f"{split} accuracy", accuracy, ours[split]["acc"]))
            for r in records:
                rows.append((f"{split} {r['Preposition']}", float(r["Accuracy"]), ours[split]["prepositions"][r["Preposition"]]["acc"]))
            if "Pair accuracy" in lines:
                rows.append((f"{split} pair accuracy", float(lines["Pair accuracy"]) / 100, ours[split]["pair_acc"]))
                rows.append((f"{split} set accuracy", float(lines["Set accuracy"]) / 100, ours[split]["set_acc"]))
    return report(rows, 1e-6)


# ---- ARO: VG-Relation, VG-Attribution ----------------------------------------------------------------------------


def aro_data(root: Path, rng: random.Random) -> None:
    base = root / "aro"
    for k in range(6):
        picture(base / "images" / f"{k}.jpg", rng)
    relations = ("on", "left of", "next to", "near", "holding", "under", "with")  # "next to", "near", "with": symmetric
    box = lambda: {"image_path": f"{rng.randrange(6)}.jpg", "bbox_x": rng.randrange(10), "bbox_y": rng.randrange(10),  # noqa: E731
                   "bbox_w": 20 + rng.randrange(18), "bbox_h": 20 + rng.randrange(10)}
    records = []
    for _ in range(120):
        a, b, relation = rng.choice(OBJECTS), rng.choice(OBJECTS), rng.choice(relations)
        records.append({**box(), "true_caption": f"the {a} is {relation} the {b}", "false_caption": f"the {b} is {relation} the {a}",
                        "relation_name": relation})
    (base / "visual_genome_relation.json").write_text(json.dumps(records))
    records = []
    for pair, count in ((("red", "blue"), 30), (("green", "white"), 26), (("yellow", "red"), 40), (("blue", "green"), 7)):
        for _ in range(count):
            a, b = rng.sample(OBJECTS, 2)
            records.append({**box(), "true_caption": f"the {pair[0]} {a} and the {pair[1]} {b}",
                            "false_caption": f"the {pair[1]} {a} and the {pair[0]} {b}", "attributes": list(pair)})
    (base / "visual_genome_attribution.json").write_text(json.dumps(records))


def compare_aro(repo: Path, root: Path, scorer) -> bool:
    import pandas as pd

    notebook = next((repo / "notebooks").glob("Replicate ARO*.ipynb"))
    source = next("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if "symmetric = [" in "".join(c["source"]))
    symmetric = ast.literal_eval(source.split("symmetric = ", 1)[1].split("\n", 1)[0])
    rows = []
    with official(repo):
        from dataset_zoo.aro_datasets import VG_Attribution, VG_Relation

        for name, make, column in (("aro_vg_relation", VG_Relation, "Relation"), ("aro_vg_attribution", VG_Attribution, "Attributes")):
            bench = REGISTRY[name]
            ours = bench.run(scorer, root, bench.ties).metrics
            records = json.loads((root / "aro" / bench.file).read_text())
            images = [root / "aro" / "images" / r["image_path"] for r in records]
            boxes = [(r["bbox_x"], r["bbox_y"], r["bbox_x"] + r["bbox_w"], r["bbox_y"] + r["bbox_h"]) for r in records]
            false, true = (scorer.pairs(images, [r[k] for r in records], boxes).numpy() for k in ("false_caption", "true_caption"))
            scores = np.stack([false, true], axis=1)[:, None, :]  # N x 1 x [false, true], as the repository orders them
            df = pd.DataFrame(make(None, root_dir=str(root / "aro")).evaluate_scores(scores))
            if column == "Relation":  # the notebook's cell
                df = df[~df.Relation.isin(symmetric)]
            rows.append((f"{name} macro", float(df.Accuracy.mean()), ours["macro"]))
            groups = ours["relations" if column == "Relation" else "attribute_pairs"]
            rows += [(f"{name} {r[column]}", float(r["Accuracy"]), groups[r[column]]["acc"]) for _, r in df.iterrows()]
    return report(rows, 1e-6)


# ---- VL-CheckList ------------------------------------------------------------------------------------------------


def vl_checklist_data(root: Path, rng: random.Random) -> None:
    from compclip.eval.benchmarks.vl_checklist import CORPUS

    base = root / "vl_checklist"
    for sources in CORPUS.values():
        for entries in sources.values():
            for file, image_root in entries:
                records = []
                for _ in range(rng.randrange(4, 9)):
                    name = f"VG_100K/{rng.randrange(10)}.jpg" if image_root == "vg" else f"{image_root}_{rng.randrange(10)}.jpg"
                    if not (base / "images" / image_root / name).exists():
                        picture(base / "images" / image_root / name, rng)
                    n = rng.randrange(1, 4)
                    records.append([name, {"POS": [phrase(rng) for _ in range(n)], "NEG": [phrase(rng) for _ in range(n)]}])
                (base / "data" / file).parent.mkdir(parents=True, exist_ok=True)
                (base / "data" / file).write_text(json.dumps(records))


def compare_vl_checklist(repo: Path, root: Path, scorer, work: Path) -> bool:
    import yaml

    from compclip.eval.benchmarks.vl_checklist import CORPUS

    corpus = json.loads((repo / "corpus.json").read_text())
    table = {dim: {source: [] for source in sources} for dim, sources in corpus.items()}
    for dim, sources in corpus.items():
        for source, names in sources.items():
            for name in names:  # "Object_Size_large_vg_obj" -> corpus/v1/Object/Size/large/vg_obj.yaml
                entry = next(p for p in (repo / "corpus" / "v1").rglob("*.yaml") if "_".join(p.relative_to(repo / "corpus" / "v1")
                                                                                            .with_suffix("").parts) == name)
                spec = yaml.safe_load(entry.read_text())
                table[dim][source].append((spec["ANNO_PATH"].removeprefix("data/"), spec["IMG_ROOT"].strip("/")))
    print(f"compclip's corpus table {'equals' if table == CORPUS else 'DIFFERS FROM'} corpus.json with the corpus/v1 yamls")
    same_corpus = table == CORPUS

    bench = REGISTRY["vl_checklist"]
    ours = bench.run(scorer, root, bench.ties).metrics
    run = work / "vl_checklist_run"  # the repository reads corpus/, data/ and the image roots from its working folder
    run.mkdir(parents=True, exist_ok=True)
    for name, target in (("corpus", repo / "corpus"), ("data", root / "vl_checklist" / "data"),
                         *((r, root / "vl_checklist" / "images" / r) for r in ("vg", "swig", "hake"))):
        if not (run / name).exists():
            (run / name).symlink_to(target)

    class Scores:
        """The repository's model interface (`VLPModel.predict`), answering compclip's scores as ITM-style probabilities."""

        def model_name(self):
            return "compclip"

        def predict(self, images, texts, src_type="local"):
            paths = [root / "vl_checklist" / "images" / p.split("/", 1)[0] / p.split("/", 1)[1] for p in images]
            return {"probs": [[1 - s, s] for s in scorer.pairs(paths, texts).tolist()]}

    cwd = os.getcwd()
    os.chdir(run)
    sys.path.insert(0, str(repo))
    try:
        from vl_checklist.evaluate import Evaluate

        for kind in sorted({"/".join(p.relative_to(repo / "corpus" / "v1").parts[:-1]) for p in (repo / "corpus" / "v1").rglob("*.yaml")}):
            names = sorted(p.stem for p in (repo / "corpus" / "v1" / kind).glob("*.yaml"))
            config = {"MAX_NUM": 0, "BATCH_SIZE": 16, "TASK": "itc", "DATA": {"TYPES": [kind], "TEST_DATA": names},
                      "OUTPUT": {"DIR": "output/compclip", "NUM": 0}}
            (run / "config.yaml").write_text(yaml.safe_dump(config))
            printed(Evaluate("config.yaml", Scores()).start)
        import radar

        # generate_chart averages, then draws with add_subplot('131'), which today's matplotlib refuses: its own lines
        # are run up to the drawing, returning the averages they computed
        source = inspect.getsource(radar.generate_chart).split("    fig_ = plt.figure")[0] + "    return arrs\n"
        exec(source, radar.__dict__)
        values = printed(radar.generate_chart, "output", str(repo / "corpus.json"), "itc", "radar", ["compclip"])[0][0]
    finally:
        os.chdir(cwd)
        sys.path.remove(str(repo))
    # evaluate.py stores each file's accuracy rounded to 4 decimals before radar.py averages them
    return report([(dim, float(v), ours[dim]["acc"]) for dim, v in zip(corpus, values, strict=True)], 1e-4) and same_corpus


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a clone of an official benchmark repository")
    parser.add_argument("--model", default="compclip-tiny-clip")
    parser.add_argument("--work", type=Path, default=None, help="folder for the generated data (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    repo = args.repo.resolve()
    kinds = {"whatsup": (whatsup_data, compare_whatsup), "aro": (aro_data, compare_aro), "vl_checklist": (vl_checklist_data, None)}
    if (repo / "vl_checklist" / "evaluate.py").is_file():
        kind = "vl_checklist"
    elif (repo / "dataset_zoo" / "aro_datasets.py").is_file():
        kind = "whatsup" if "Controlled_Images" in (repo / "dataset_zoo" / "aro_datasets.py").read_text() else "aro"
    else:
        sys.exit(f"{repo}: not a clone of whatsup_vlms, vision-language-models-are-bows or VL-CheckList")
    work = args.work or Path(tempfile.mkdtemp(prefix="eval_vs_official-"))
    root = work / "data"
    if not root.is_dir():
        kinds[kind][0](root, random.Random(args.seed))
    model, preprocess, tokenizer = load_model(args.model)
    scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=0)
    print(f"{kind}: {repo} against compclip on {root}, model {args.model}")
    same = compare_vl_checklist(repo, root, scorer, work) if kind == "vl_checklist" else kinds[kind][1](repo, root, scorer)
    print("same figures" if same else "FIGURES DIFFER")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
