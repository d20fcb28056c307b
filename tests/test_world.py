"""The binding world: deterministic, every caption true of its image, every negative false,
held-out pairings absent from training, and every benchmark file readable by the harness."""
import dataclasses
import json
import re

import numpy as np
import pytest
import torch
from PIL import Image

from compclip.errors import UsageError
from compclip.world import COLORS, SHAPES, Scene, WorldConfig, generate, relation, render

CFG = WorldConfig(seed=3, n_train=300, n_val=40, n_test=60, n_singles=90, size=64)
NAME = r"(small|large) (\w+) (\w+)"
RELS = "to the left of|to the right of|above|below|next to"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("world") / "w", CFG, workers=2)


def scenes(folder):
    return [json.loads(line) for line in (folder / "scenes.jsonl").read_text().splitlines()]


def find(scene, size, color, shape):
    found = [o for o in scene.objects if (o.size, o.color, o.shape) == (size, color, shape)]
    assert len(found) == 1, (size, color, shape)
    return found[0]


def claims(caption):
    """(subject, relation, object) triples of a long caption, parsed independently of how it was written."""
    out = []
    for sentence in re.split(r"(?<=\.) ", caption)[1:]:
        m = (re.fullmatch(rf"The {NAME} is ({RELS}) the {NAME}\.", sentence)
             or re.fullmatch(rf"A {NAME} sits ({RELS}) a {NAME}\.", sentence)
             or re.fullmatch(rf"You can see the {NAME} ({RELS}) the {NAME}\.", sentence))
        if m:
            g = m.groups()
            out.append((g[0:3], g[3], g[4:7]))
            continue
        m = re.fullmatch(rf"(To the left of|To the right of|Above|Below|Next to) the {NAME} there is a {NAME}\.", sentence)
        assert m, sentence
        g = m.groups()
        out.append((g[4:7], g[0].lower(), g[1:4]))
    return out


def test_same_seed_same_bytes(world, tmp_path):
    again = generate(tmp_path / "again", CFG, workers=1)  # another worker count, too
    files = sorted(p.relative_to(world) for p in world.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert len(files) > 300 and {"train/images.npy", "val/images.npy", "singles/images.npy"} <= {str(p) for p in files}
    for rel in files:
        assert (world / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_captions_are_true_of_their_images(world):
    captions = [r["caption"] for r in scenes(world / "train")]
    assert any(" next to " in c for c in captions) and any(" next to " not in c and "to the left of" in c for c in captions)
    for rec in scenes(world / "train")[:120]:
        scene = Scene.from_dict(rec["scene"])
        caption = rec["caption"]
        for o in scene.objects:
            assert f"{o.size} {o.color} {o.shape}" in caption
        triples = claims(caption)
        assert len(triples) == len(scene.objects) - 1
        for a, rel, b in triples:
            first, second = find(scene, *a), find(scene, *b)
            if rel == "next to":  # side by side: mostly horizontal offset, and close
                dx, dy = first.x - second.x, first.y - second.y
                assert abs(dx) >= abs(dy) and (dx * dx + dy * dy) ** 0.5 < 0.4
            else:
                assert relation(first, second) == rel
        assert rec["phrases"] == [f"a {o.size} {o.color} {o.shape}" for o in scene.objects]
        # DAC's dense captions: the phrases, then a true statement about each pair of horizontal neighbours
        dense = rec["dense_captions"]
        assert dense[: len(scene.objects)] == rec["phrases"] and len(dense) == 2 * len(scene.objects) - 1
        for said in dense[len(scene.objects):]:
            c1, s1, rel, c2, s2 = re.fullmatch(rf"a (\w+) (\w+) ({RELS}) a (\w+) (\w+)", said).groups()
            assert any(relation(a, b) == rel for a in scene.objects for b in scene.objects
                       if (a.color, a.shape, b.color, b.shape) == (c1, s1, c2, s2)), said
        image = np.load(world / "train" / "images.npy", mmap_mode="r")[rec["index"]]
        for o in scene.objects:  # the centre pixel of every shape has its colour
            assert tuple(image[int(o.y * CFG.size), int(o.x * CFG.size)]) == COLORS[o.color]


def test_heldout_pairings_never_appear_in_training(world):
    held = {tuple(p) for p in json.loads((world / "manifest.json").read_text())["heldout"]}
    assert len(held) == round(0.25 * 70)
    for split in ("train", "val"):
        for rec in scenes(world / split):
            assert not {(o["color"], o["shape"]) for o in rec["scene"]["objects"]} & held
            assert not any(f"{c} {s}" in rec["caption"] for c, s in held)
    for rec in scenes(world / "test_unseen"):
        assert {(o["color"], o["shape"]) for o in rec["scene"]["objects"]} & held
    for rec in scenes(world / "test_seen"):
        assert not {(o["color"], o["shape"]) for o in rec["scene"]["objects"]} & held


def evaluate(scene, text):
    """The truth of a benchmark caption, decided here from its words and the scene."""
    m = re.fullmatch(rf"a (?:(small|large) )?(\w+) (\w+)(?: ({RELS}) a (\w+) (\w+))?(?: and a (\w+) (\w+))?", text)
    assert m, text
    size, c1, s1, rel, c2, s2, c3, s3 = m.groups()
    first = [o for o in scene.objects if (o.color, o.shape) == (c1, s1) and size in (None, o.size)]
    if not first:
        return False
    if c3 and not any((o.color, o.shape) == (c3, s3) for o in scene.objects):
        return False
    if rel is None:
        return True
    second = [o for o in scene.objects if (o.color, o.shape) == (c2, s2)]
    return bool(second) and relation(first[0], second[0]) == rel


@pytest.mark.parametrize("split", ["test_seen", "test_unseen"])
def test_positives_true_negatives_false(world, split):
    by_file = {f"{split}_{r['index']:06d}.png": Scene.from_dict(r["scene"]) for r in scenes(world / split)}
    held = {tuple(p) for p in json.loads((world / "manifest.json").read_text())["heldout"]}
    counts = {}
    for file in sorted((world / split / "sugarcrepe").glob("*.json")):
        records = list(json.loads(file.read_text()).values())
        counts[file.stem] = len(records)
        for r in records:
            scene = by_file[r["filename"]]
            assert evaluate(scene, r["caption"]) and not evaluate(scene, r["negative_caption"]), r
            if split == "test_unseen":
                assert any(f"{c} {s}" in r["caption"] for c, s in held)
            else:  # nothing in a seen question names a held-out pairing: a text prior cannot pass it
                assert not any(f"{c} {s}" in r["caption"] + " " + r["negative_caption"] for c, s in held), r
    assert min(counts.values()) > CFG.n_test // 3 and len(counts) == 7
    for file in sorted((world / split / "sugarcrepe_pp").glob("*.json")):
        for r in json.loads(file.read_text()):
            assert r["caption2"] != r["caption"] and not evaluate(by_file[r["filename"]], r["negative_caption"])


def test_every_benchmark_file_loads_in_the_harness(world):
    from compclip.eval import REGISTRY, DualEncoderScorer
    from compclip.models import load_model

    scorer = DualEncoderScorer(*load_model("compclip-tiny-siglip"), workers=0)
    for root in (world / "test_seen", world / "test_unseen"):
        for name in ("sugarcrepe", "sugarcrepe_pp", "zeroshot", "retrieval"):
            result = REGISTRY[name].run(scorer, root, "strict")
            assert result.complete, (root, name)
        assert result.metrics["world"]["images"] == CFG.n_test
    zs = REGISTRY["zeroshot"].run(scorer, world / "test_seen", "strict").metrics
    assert zs["shape"]["classes"] == 7 and zs["shape"]["n"] == CFG.n_test


def test_every_scene_keeps_all_its_objects():
    import random

    from compclip.world import SHAPES, place

    pairs = [(c, s) for c in COLORS for s in SHAPES]
    for seed in range(300):
        rng = random.Random(seed)
        chosen = rng.sample(pairs, 4)
        assert [(o.color, o.shape) for o in place(rng, seed, chosen).objects] == chosen


def test_every_world_benchmark_gives_the_same_json_through_any_scorer(world):
    """Benchmarks ask only the Scorer interface: the dual encoder's batched paths (embeddings multiplied in
    bulk, CLIP's prompt ensemble) and a scorer that scores one pair at a time give the same results. The
    colour model's 0/1 embeddings make every score exact, so "the same" means equal, not close."""
    from compclip.eval import REGISTRY
    from test_eval_formats import PairwiseScorer, scorer

    class PairwiseWithTexts(PairwiseScorer):
        def text_pairs(self, a, b):
            return torch.tensor([float(self.embed.texts([x])[0] @ self.embed.texts([y])[0]) for x, y in zip(a, b, strict=True)])

    for root in (world / "test_seen", world / "test_unseen"):
        for name in ("sugarcrepe", "sugarcrepe_pp", "zeroshot", "retrieval"):
            dual, pairwise = REGISTRY[name].run(scorer(), root, "strict"), REGISTRY[name].run(PairwiseWithTexts(), root, "strict")
            assert dual.metrics == pairwise.metrics, (root.name, name)


def test_the_training_array_is_the_png_rendering_byte_for_byte(world, tmp_path):
    """images.npy holds exactly what the PNG of each scene decodes to, and ArrayReader serves it undecoded."""
    from compclip.data import ArrayReader, open_reader

    images = np.load(world / "train" / "images.npy")
    records = scenes(world / "train")
    assert images.shape == (CFG.n_train, CFG.size, CFG.size, 3) and images.dtype == np.uint8
    for rec in records[:40]:
        path = tmp_path / "scene.png"
        render(Scene.from_dict(rec["scene"]), CFG.size).save(path, format="PNG")
        assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), images[rec["index"]])
    reader = open_reader(world / "train" / "images.npy")
    assert isinstance(reader, ArrayReader)
    samples = list(reader)
    assert [s["caption"] for s in samples] == [r["caption"] for r in records]
    assert all(np.array_equal(np.asarray(s["image"]), images[i]) for i, s in enumerate(samples[:50]))


def test_single_objects_name_their_shape_first(world):
    """singles/: one object of a seen pairing per image, rendered as its record says; `shape_caption` names only
    its shape, `caption` its colour and shape, its shape, or its colour, in turn."""
    from compclip.data import open_reader

    held = {tuple(p) for p in json.loads((world / "manifest.json").read_text())["heldout"]}
    images, records = np.load(world / "singles" / "images.npy"), scenes(world / "singles")
    assert images.shape == (CFG.n_singles, CFG.size, CFG.size, 3) and len(records) == CFG.n_singles
    for rec in records:
        (obj,) = rec["scene"]["objects"]
        assert (obj["color"], obj["shape"]) not in held
        assert rec["shape_caption"].split() == ["a", obj["shape"]]
        expected = (["a", obj["color"], obj["shape"]], ["a", obj["shape"]], ["something", obj["color"]])[rec["index"] % 3]
        assert rec["caption"].split() == expected
    for i, rec in enumerate(records[:20]):
        assert np.array_equal(np.asarray(render(Scene.from_dict(rec["scene"]), CFG.size)), images[i])
    assert len({r["shape_caption"] for r in records}) == CFG.shapes
    by_key = [s["caption"] for s in open_reader(world / "singles" / "images.npy", caption_key="shape_caption")]
    assert by_key == [r["shape_caption"] for r in records]


def test_knobs_change_what_the_captions_say():
    """Each literature lever, checked against the scene records it was generated from."""
    import random

    from compclip.world import long_caption, place

    def four(i):  # distinct colours and shapes, so that every word names one object
        rng = random.Random(i)
        return list(zip(rng.sample(list(COLORS), 4), rng.sample(SHAPES, 4), strict=True))

    scenes_ = [place(random.Random(i), i, four(i)) for i in range(200)]
    named = lambda caption, o: o.shape in caption and f"{o.color} {o.shape}" in caption  # noqa: E731
    full = [long_caption(s, random.Random(s.seed)) for s in scenes_]
    assert all(named(c, o) and f"{o.size} {o.color} {o.shape}" in c for c, s in zip(full, scenes_, strict=True) for o in s.objects)
    half = [long_caption(s, random.Random(s.seed), completeness=0.5) for s in scenes_]
    for caption, scene in zip(half, scenes_, strict=True):
        assert sum(re.search(rf"\b{o.shape}\b", caption) is not None for o in scene.objects) == 2
    salient = [long_caption(s, random.Random(s.seed), saliency=True) for s in scenes_]
    for caption, scene in zip(salient, scenes_, strict=True):
        largest = max(scene.objects, key=lambda o: o.radius)
        assert [o for o in scene.objects if re.search(rf"\b{o.shape}\b", caption)] == [largest]
    bare = [long_caption(s, random.Random(s.seed), density=0.0) for s in scenes_]
    assert not any(w in c for c in bare for w in (*COLORS, "small", "large"))
    some = [long_caption(s, random.Random(s.seed), density=0.5) for s in scenes_]
    said = sum(o.color in c for c, s in zip(some, scenes_, strict=True) for o in s.objects) / (4 * len(scenes_))
    assert 0.4 < said < 0.6


def test_palette_and_objects_per_scene(tmp_path):
    cfg = WorldConfig(seed=1, n_train=60, n_val=4, n_test=12, size=32, colors=3, shapes=2, min_objects=2, max_objects=2, heldout=0.2)
    world = generate(tmp_path / "w", cfg, workers=1)
    for rec in scenes(world / "train"):
        objects = rec["scene"]["objects"]
        assert len(objects) == 2
        assert {o["color"] for o in objects} <= set(list(COLORS)[:3]) and {o["shape"] for o in objects} <= set(SHAPES[:2])
    assert len(json.loads((world / "manifest.json").read_text())["heldout"]) == round(0.2 * 6)


def test_world_sweep_draws_a_point_per_value_and_reuses_a_demo(tmp_path, capsys, monkeypatch):
    """research/world_sweep.py at toy size, run as its own `__main__` in this process (runpy, its arguments in sys.argv):
    one world, base and fine-tune per knob value, each world made with its value and the world seed asked for; a demo
    folder (or one of its worlds) whose world matches a value is reused, not trained again; a folder whose models were
    trained on another world is refused."""
    import runpy
    import sys
    from pathlib import Path

    from compclip.demo import compare_methods
    from compclip.errors import UsageError

    script = Path(__file__).parents[1] / "research" / "world_sweep.py"
    toy = ["--knob", "completeness", "--methods", "siglip", "--seeds", "4", "--world-seed", "7", "--n-train", "200", "--n-test", "30",
           "--pretrain-steps", "2", "--pretrain-batch-size", "16", "--steps", "2", "--batch-size", "16"]

    def sweep(*args):
        monkeypatch.setattr(sys, "argv", [str(script), *toy, *args])
        runpy.run_path(str(script), run_name="__main__")
        return capsys.readouterr()

    sweep("--values", "1", "--out", str(tmp_path / "a"))
    result = sweep("--values", "0.5,1", "--out", str(tmp_path / "b"), "--demo", str(tmp_path / "a" / "completeness-1"))
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["binding_curve_completeness.png", "completeness-0.5", "sweep.json"]
    manifest = json.loads((tmp_path / "b" / "completeness-0.5" / "world" / "manifest.json").read_text())
    assert manifest["config"]["completeness"] == 0.5 and manifest["config"]["n_train"] == 200 and manifest["config"]["seed"] == 7
    reused = json.loads((tmp_path / "a" / "completeness-1" / "results" / "siglip-ft" / "unseen" / "sugarcrepe.json").read_text())
    points = json.loads((tmp_path / "b" / "sweep.json").read_text())["points"]
    assert [p["value"] for p in points] == [0.5, 1.0] and set(points[0]["per_seed"]) == {"base", "siglip-ft"}
    assert points[1]["per_seed"]["siglip-ft"] == [100 * reused["metrics"]["swap_att"]["acc"]]
    assert "| 0.5 |" in result.out and "| 1 |" in result.out
    assert Image.open(tmp_path / "b" / "binding_curve_completeness.png").size[0] > 400
    assert (tmp_path / "a" / "completeness-1" / "report" / "binding_curve_completeness.png").is_file()  # for the demo's report
    (tmp_path / "c" / "worlds").mkdir(parents=True)  # a demo whose second world (`--world-seeds 0,7`) is that point
    (tmp_path / "c" / "worlds" / "seed-7").symlink_to(tmp_path / "a" / "completeness-1")
    sweep("--values", "1", "--out", str(tmp_path / "d"), "--demo", str(tmp_path / "c"))
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["binding_curve_completeness.png", "sweep.json"]
    with pytest.raises(UsageError, match="its world was made with other settings"):
        compare_methods(tmp_path / "a" / "completeness-1", "siglip", 200, 30, 2, 2, 16, "4", 2, {"completeness": 0.5, "seed": 7},
                        pretrain_batch_size=16)



def test_the_demo_fine_tunes_at_once_as_it_does_one_after_another(tmp_path):
    """`--jobs 2`: the fine-tunes train side by side, each in a spawned process, to the same weights and numbers as one
    after another in the demo's own process (a CPU's default); a --jobs of 0 is refused before anything is made."""
    import io

    from rich.console import Console
    from safetensors.torch import load_file

    from compclip.demo import compare_methods

    toy = {"world": {"seed": 3}, "pretrain_batch_size": 16, "device": "cpu"}
    args = ("siglip,attswap", 200, 30, 2, 3, 16, "0", 1)
    said = {"apart": io.StringIO(), "together": io.StringIO()}
    apart, apart_runs, _ = compare_methods(tmp_path / "apart", *args, **toy, console=Console(file=said["apart"]), jobs=None)
    together, together_runs, _ = compare_methods(tmp_path / "together", *args, **toy, console=Console(file=said["together"]), jobs=2)
    assert "at once" not in said["apart"].getvalue()  # a CPU's default: one after another
    assert "fine-tuning 2 runs, 2 at once" in said["together"].getvalue()
    for name in ("siglip-ft", "attswap-ft"):  # each said as it ends: minutes would pass on a GPU without a line
        assert re.search(rf"^  {name} \(seed 0\) fine-tuned, \d+ s$", said["together"].getvalue(), re.M), said["together"].getvalue()
    assert together == apart
    for name in ("siglip-ft", "attswap-ft"):
        a, b = (load_file(runs[name][0] / "model.safetensors") for runs in (apart_runs, together_runs))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(UsageError, match="--jobs must be at least 1"):
        compare_methods(tmp_path / "none", *args, **toy, jobs=0)
    assert not (tmp_path / "none").exists()


def test_the_fine_tunes_at_once_share_the_cores_instead_of_each_taking_all(monkeypatch):
    """Each spawned fine-tune runs torch on its share of the cores this process may use (theirs and this one's), not
    on as many as it would take by itself (OMP_NUM_THREADS, here more than the share): several processes each spinning
    every core's thread starve each other's steps."""
    import os

    from compclip.demo import at_once

    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert at_once(torch.get_num_threads, [{}, {}], 2) == [max(1, len(os.sched_getaffinity(0)) // 3)] * 2


def test_a_demo_run_again_after_a_stop_scores_every_benchmark_of_every_model(tmp_path):
    """A stop while the demo scores leaves each folder's earlier benchmarks written (each result with its items) and the
    later ones not, the one under way at most its items (they are written before the result). Run again in the same
    folder, the demo scores every benchmark of every model, to the numbers an uninterrupted run gives."""
    import io

    from rich.console import Console

    from compclip.demo import BENCHMARKS, compare_methods

    toy = {"world": {"seed": 3}, "pretrain_batch_size": 16, "device": "cpu", "splits": ("seen",), "console": Console(file=io.StringIO())}
    args = (tmp_path / "demo", "siglip", 200, 30, 2, 2, 16, "0", 1)
    whole, _, folders = compare_methods(*args, **toy)
    benchmarks = BENCHMARKS.split(",")
    results = {f: {b: json.loads((f / f"{b}.json").read_text())["metrics"] for b in benchmarks} for f in folders}
    base, tuned = (tmp_path / "demo" / "results" / name / "seen" for name in ("base", "siglip-ft"))
    assert folders == [base, tuned]
    # stopped in the base's last benchmark (its items written, not its result), and in the fine-tune's third
    (base / "retrieval.json").unlink()
    for name in ("zeroshot.json", "zeroshot.items.parquet", "retrieval.json", "retrieval.items.parquet"):
        (tuned / name).unlink()
    again, _, _ = compare_methods(*args, **toy)
    for folder in folders:
        assert {b: json.loads((folder / f"{b}.json").read_text())["metrics"] for b in benchmarks} == results[folder]
        assert all((folder / f"{b}.items.parquet").is_file() for b in benchmarks)
    assert again == whole


def test_statements_caption_scenes_in_the_tests_own_form(tmp_path):
    """`statements`: that share of scenes is captioned by one true statement about two of its objects, phrased as the
    benchmarks phrase theirs; the images, and every other caption, stay as they were without it."""
    plain = WorldConfig(seed=2, n_train=200, n_val=4, n_test=8, size=32, min_objects=1, max_objects=3)
    without = generate(tmp_path / "plain", plain, workers=1)
    half = generate(tmp_path / "half", dataclasses.replace(plain, statements=0.5), workers=1)
    assert (without / "train" / "images.npy").read_bytes() == (half / "train" / "images.npy").read_bytes()
    short = 0
    for before, after in zip(scenes(without / "train"), scenes(half / "train"), strict=True):
        scene = Scene.from_dict(after["scene"])
        if after["caption"] == before["caption"]:
            continue
        short += 1
        assert len(scene.objects) >= 2 and evaluate(scene, after["caption"]), after
        assert re.fullmatch(rf"a (\w+) (\w+) ({RELS}) a (\w+) (\w+)", after["caption"]), after["caption"]
    several = sum(len(r["scene"]["objects"]) >= 2 for r in scenes(without / "train"))
    assert 0.35 * several < short < 0.65 * several
    with pytest.raises(UsageError, match="statements"):
        WorldConfig(statements=1.5)


@pytest.mark.parametrize(("settings", "said"), [
    ({"heldout": 0.0}, r"--heldout must lie in \(0, 0.5\], not 0.0"),
    ({"heldout": 0.6}, r"--heldout must lie in \(0, 0.5\], not 0.6"),
    ({"heldout": 0.1, "colors": 2, "shapes": 2, "max_objects": 3}, r"holds out none of the 4 colour×shape pairings.*--heldout 0.25"),
    ({"heldout": 0.25, "colors": 2, "shapes": 2}, r"leaves 3 of the 4 colour×shape pairings seen, and a scene of --max-objects 4"),
    ({"size": 2000}, r"--size must lie in 32..1024 pixels"),
])
def test_a_world_that_cannot_be_drawn_is_refused_by_its_settings(settings, said):
    """Settings under which generation crashed (no held-out pairing to draw an unseen scene from, fewer seen pairings than a
    scene's objects) or never ended (almost every pairing held out; an image array of 100,000 pixels a side)."""
    with pytest.raises(UsageError, match=said):
        WorldConfig(**settings)


def test_the_smallest_world_its_settings_allow_is_drawn(tmp_path):
    """Three colours, two shapes, half held out, three objects at most: the bounds above are not tighter than needed."""
    world = generate(tmp_path / "w", WorldConfig(seed=0, n_train=20, n_val=2, n_test=20, size=32, colors=3, shapes=2, heldout=0.5,
                                                 max_objects=3), workers=1)
    assert len(json.loads((world / "manifest.json").read_text())["heldout"]) == 3
