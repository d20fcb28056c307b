"""The evaluation harness: every protocol against brute force on hand-built scores (ties included),
the real SugarCrepe / SugarCrepe++ files over generated stand-in images, real Flickr8k retrieval."""
import csv
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from compclip.eval import REGISTRY, protocols
from conftest import shared_data

# ---- protocols on hand-built scores ---------------------------------------------------


def test_pairs_with_ties():
    pos = torch.tensor([0.5, 0.3, 0.3, 0.1])
    neg = torch.tensor([0.4, 0.3, 0.5, 0.1])
    assert protocols.pair_accuracy(pos, neg, "strict").tolist() == [True, False, False, False]
    assert protocols.pair_accuracy(pos, neg, "clip_benchmark").tolist() == [True, True, False, True]
    with pytest.raises(FloatingPointError, match=r"1 of 4 rows .* row 2"):  # NonFiniteError: a score, not a wrong answer
        protocols.pair_accuracy(pos, torch.tensor([0.4, 0.3, float("nan"), 0.1]))


# The harness and a brute force run the same model on differently composed batches, so their
# scores differ by float rounding (about 1e-7 here). A decision whose margin is beyond EPS is the
# same in both on any torch version or thread count; only the few closer ones may go either way.
EPS = 1e-5


def accuracy_bounds(margins: list[float]) -> tuple[float, float]:
    """(surely, possibly) the accuracy of "correct iff margin > 0", whatever rounding below EPS does."""
    return sum(m > EPS for m in margins) / len(margins), sum(m > -EPS for m in margins) / len(margins)


def recall_bounds(scores: torch.Tensor, positive: torch.Tensor, k: int) -> tuple[float, float]:
    """(surely, possibly) Recall@k under strict ties: a query is a hit iff fewer than k negatives
    score at least its best positive, whatever rounding below EPS does."""
    best = scores.masked_fill(~positive, float("-inf")).max(dim=1, keepdim=True).values
    maybe_ahead = ((scores >= best - EPS) & ~positive).sum(1)
    surely_ahead = ((scores > best + EPS) & ~positive).sum(1)
    return (maybe_ahead < k).float().mean().item(), (surely_ahead < k).float().mean().item()


def assert_within(value: float, bounds: tuple[float, float]) -> None:
    low, high = bounds
    assert high - low <= 0.01, bounds  # near-ties are rare: the check stays sharp
    assert low - 1e-6 <= value <= high + 1e-6, (value, bounds)


def brute_pick(row, target, ties):
    if ties == "strict":
        return all(row[target] > v for j, v in enumerate(row) if j != target)
    best = max(row)
    return row.index(best) == target  # list.index: the first of equal maxima


@pytest.mark.parametrize("ties", protocols.TIES)
def test_picks_against_brute_force(ties):
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (300, 5), generator=g).float()  # small integers: many ties
    target = torch.randint(0, 5, (300,), generator=g)
    expected = [brute_pick(r, int(t), ties) for r, t in zip(scores.tolist(), target, strict=True)]
    assert protocols.picks(scores, target, ties).tolist() == expected


@pytest.mark.parametrize("ties", protocols.TIES)
def test_itt_tot_winoground_inpaint_against_brute_force(ties):
    g = torch.Generator().manual_seed(1)
    s = torch.randint(0, 3, (400, 2, 2), generator=g).float()
    gt = lambda a, b: a > b if ties == "strict" else a >= b  # noqa: E731  (the right answer listed first)
    itt = protocols.itt(s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], ties)
    assert itt.tolist() == [
        gt(a, c) and gt(b, c) for a, b, c in zip(s[:, 0, 0].tolist(), s[:, 0, 1].tolist(), s[:, 1, 0].tolist(), strict=True)
    ]
    tot = protocols.tot(s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], ties)
    assert tot.tolist() == [
        gt(a, b) and gt(a, c) for a, b, c in zip(s[:, 0, 0].tolist(), s[:, 0, 1].tolist(), s[:, 1, 0].tolist(), strict=True)
    ]
    wino = protocols.winoground(s, ties)  # s[n, caption, image]
    for n, (c0, c1) in enumerate(s.tolist()):
        text = brute_pick([c0[0], c1[0]], 0, ties) and brute_pick([c0[1], c1[1]], 1, ties)
        image = brute_pick([c0[0], c0[1]], 0, ties) and brute_pick([c1[0], c1[1]], 1, ties)
        assert (wino["text"][n].item(), wino["image"][n].item(), wino["group"][n].item()) == (text, image, text and image)
    inpaint = protocols.inpaint(s, ties)  # s[n, image, caption]
    for n, ((oo, oi), (io, ii)) in enumerate(s.tolist()):
        assert inpaint[n].item() == (brute_pick([oo, io], 0, ties) and brute_pick([oi, ii], 1, ties))


@pytest.mark.parametrize("ties", protocols.TIES)
def test_recall_at_k_against_brute_force(ties):
    g = torch.Generator().manual_seed(2)
    scores = torch.randint(0, 6, (60, 20), generator=g).float()
    owner = torch.randint(0, 20, (60,), generator=g)
    positives = owner[:, None] == torch.arange(20)[None, :]
    got = protocols.recall_at_k(scores, positives, (1, 5, 10), ties)
    for k in (1, 5, 10):
        hits = 0
        for q in range(60):
            mine = scores[q, owner[q]].item()
            ahead = sum(1 for j in range(20) if j != owner[q] and (scores[q, j] >= mine if ties == "strict" else scores[q, j] > mine))
            hits += ahead < k
        assert got[k] == pytest.approx(hits / 60)


# ---- real annotation files with stand-in images ---------------------------------------


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """SugarCrepe(++) annotations as published, stand-in images under their real COCO names."""
    root = tmp_path_factory.mktemp("data")
    for name in ("sugarcrepe", "sugarcrepe_pp"):
        (root / name).symlink_to(shared_data(name))
    names = {r["filename"] for f in shared_data("sugarcrepe").glob("*.json") for r in json.loads(f.read_text()).values()}
    names |= {r["filename"] for f in shared_data("sugarcrepe_pp").glob("*.json") for r in json.loads(f.read_text())}
    images = root / "coco" / "val2017"
    images.mkdir(parents=True)
    for name in sorted(names):
        seed = int(name.split(".")[0])
        Image.new("RGB", (32, 24), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(images / name)
    (root / "retrieval").mkdir()
    (root / "retrieval" / "flickr8k_1k").symlink_to(shared_data("flickr8k_1k"))
    return root


@pytest.fixture(scope="module")
def tiny():
    from compclip.models import load_model

    torch.manual_seed(0)
    return load_model("compclip-tiny-clip")


def embed(model, preprocess, tokenizer, root, filename, texts):
    """Brute force: one example at a time, no de-duplication, no cache."""
    with torch.no_grad():
        image = F.normalize(model.encode_image(preprocess(Image.open(root / "coco" / "val2017" / filename).convert("RGB"))[None]), dim=-1)[
            0
        ]
        return image, F.normalize(model.encode_text(tokenizer(texts)), dim=-1)


def test_sugarcrepe_and_pp_against_per_example_brute_force(data_root, tiny):
    from compclip.eval import DualEncoderScorer

    model, preprocess, tokenizer = tiny
    scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=0)
    sc = REGISTRY["sugarcrepe"].run(scorer, data_root, "strict")
    pp = REGISTRY["sugarcrepe_pp"].run(scorer, data_root, "strict")
    assert sc.complete and pp.complete
    splits = ("add_obj", "add_att", "replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att")
    assert sum(sc.metrics[s]["n"] for s in splits) == 7511
    # SugarCrepe's and SugarCrepe++'s images overlap: each unique image is encoded once for both
    assert scorer.encoded["images"] == len(list((data_root / "coco" / "val2017").iterdir()))
    assert sc.metrics["swap"] == pytest.approx((sc.metrics["swap_obj"]["acc"] + sc.metrics["swap_att"]["acc"]) / 2)
    records = list(json.loads((data_root / "sugarcrepe" / "swap_att.json").read_text()).values())
    margins = []
    for r in records:
        image, (pos, neg) = embed(model, preprocess, tokenizer, data_root, r["filename"], [r["caption"], r["negative_caption"]])
        margins.append(float(image @ pos) - float(image @ neg))
    assert_within(sc.metrics["swap_att"]["acc"], accuracy_bounds(margins))
    records = json.loads((data_root / "sugarcrepe_pp" / "swap_att.json").read_text())
    itt, tot = [], []
    for r in records:
        image, (p1, p2, n) = embed(
            model, preprocess, tokenizer, data_root, r["filename"], [r["caption"], r["caption2"], r["negative_caption"]]
        )
        itt.append(min(float(image @ p1) - float(image @ n), float(image @ p2) - float(image @ n)))
        tot.append(min(float(p1 @ p2) - float(p1 @ n), float(p1 @ p2) - float(p2 @ n)))
    assert_within(pp.metrics["swap_att"]["itt"], accuracy_bounds(itt))
    assert_within(pp.metrics["swap_att"]["tot"], accuracy_bounds(tot))


def test_embedding_cache_is_read_back(data_root, tiny, tmp_path):
    from compclip.eval import DualEncoderScorer

    first = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path)
    a = REGISTRY["sugarcrepe_pp"].run(first, data_root, "strict")
    second = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path)
    b = REGISTRY["sugarcrepe_pp"].run(second, data_root, "strict")
    assert first.encoded["images"] > 0 and second.encoded == {"images": 0, "texts": 0}
    assert a.metrics == b.metrics


def test_missing_images_are_reported_not_dropped_silently(data_root, tiny, tmp_path):
    from compclip.eval import DualEncoderScorer

    root = tmp_path / "partial"
    (root / "coco" / "val2017").mkdir(parents=True)
    (root / "sugarcrepe").symlink_to(data_root / "sugarcrepe")
    kept = sorted((data_root / "coco" / "val2017").iterdir())[:200]
    for p in kept:
        (root / "coco" / "val2017" / p.name).symlink_to(p)
    result = REGISTRY["sugarcrepe"].run(DualEncoderScorer(*tiny, workers=0), root, "strict")
    assert not result.complete
    report = result.missing.as_record()
    total = len({r["filename"] for f in (root / "sugarcrepe").glob("*.json") for r in json.loads(f.read_text()).values()})
    assert report["count"] == total - 200 and len(report["examples"]) == 5
    for split, m in result.metrics.items():
        if isinstance(m, dict):
            records = json.loads((root / "sugarcrepe" / f"{split}.json").read_text())
            assert m["n"] + m["n_missing"] == len(records)


def test_a_benchmark_without_any_image_still_reports(data_root, tiny, tmp_path):
    from compclip.eval import DualEncoderScorer

    (tmp_path / "sugarcrepe_pp").symlink_to(data_root / "sugarcrepe_pp")
    result = REGISTRY["sugarcrepe_pp"].run(DualEncoderScorer(*tiny, workers=0), tmp_path, "strict")
    assert not result.complete and result.missing.as_record()["count"] > 1000
    m = result.metrics["swap_att"]
    assert m["n_itt"] == 0 and m["itt"] != m["itt"] and 0 <= m["tot"] <= 1  # no image: ITT is NaN, TOT still scored


def test_flickr8k_retrieval_against_brute_force(data_root, tiny):
    from compclip.eval import DualEncoderScorer

    model, preprocess, tokenizer = tiny
    scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=2)
    result = REGISTRY["retrieval"].run(scorer, data_root, "strict")
    m = result.metrics["flickr8k_1k"]
    assert (m["images"], m["captions"]) == (1000, 5000) and result.complete
    with open(data_root / "retrieval" / "flickr8k_1k" / "captions.csv", newline="", encoding="utf-8") as f:
        rows = [(r["image"], r["caption"]) for r in csv.DictReader(f)]  # quoted captions hold commas
    names = list(dict.fromkeys(r[0] for r in rows))
    folder = data_root / "retrieval" / "flickr8k_1k" / "images"
    with torch.no_grad():
        images = torch.cat(
            [
                F.normalize(
                    model.encode_image(torch.stack([preprocess(Image.open(folder / n).convert("RGB")) for n in names[i : i + 100]])), dim=-1
                )
                for i in range(0, 1000, 100)
            ]
        )
        texts = torch.cat([F.normalize(model.encode_text(tokenizer([r[1] for r in rows[i:i + 500]])), dim=-1) for i in range(0, 5000, 500)])
    sims = texts @ images.T
    owner = torch.tensor([names.index(r[0]) for r in rows])
    positive = owner[:, None] == torch.arange(1000)[None, :]
    for k in (1, 5, 10):
        assert_within(m[f"image_retrieval_recall@{k}"], recall_bounds(sims, positive, k))
        assert_within(m[f"text_retrieval_recall@{k}"], recall_bounds(sims.T, positive.T, k))


def test_cli_eval_writes_clip_benchmark_records_and_report(data_root, tmp_path, capsys, monkeypatch):
    """`compclip eval`, `report` and `data check` through the command line's entry point (in this process: what they print
    and write is what the test reads), the data root from COMPCLIP_DATA."""
    from compclip.models import load_model, save_checkpoint
    from conftest import run_main

    model, _, _ = load_model("compclip-tiny-siglip")
    save_checkpoint(model, tmp_path / "ckpt")
    monkeypatch.setenv("COMPCLIP_DATA", str(data_root))
    run = lambda *a: subprocess.CompletedProcess(a, *run_main(capsys, "-q", *a))  # noqa: E731
    for label, ties in (("a", "official"), ("b", "clip_benchmark")):
        result = run("eval", "--model", str(tmp_path / "ckpt"), "--benchmark", "sugarcrepe,sugarcrepe_pp,winoground,sugarcrepe/swap_att",
                     "--out", str(tmp_path / label), "--ties", ties, "--cache", str(tmp_path / "cache"), "--device", "cpu")
        # winoground's files are missing: its result is written, incomplete, and the exit code says so
        assert result.returncode == 1 and "winoground: nothing evaluated (looked for " in result.stdout, result.stderr[-3000:]
    record = json.loads((tmp_path / "a" / "sugarcrepe.json").read_text())
    assert {"dataset", "model", "pretrained", "task", "metrics"} <= set(record) and record["task"] == "image_caption_selection"
    assert (record["ties"], record["ties_option"]) == ("strict", "official")  # sugar-crepe's own rule
    assert record["complete"] and set(record["metrics"]["add_att"]) == {"acc", "n", "n_missing"}
    one = json.loads((tmp_path / "a" / "sugarcrepe-swap_att.json").read_text())  # one split, as CLIP_benchmark's sugar_crepe/swap_att
    assert one["dataset"] == "sugarcrepe/swap_att" and one["complete"] and one["metrics"]["swap_att"] == record["metrics"]["swap_att"]
    assert set(one["metrics"]) == {"swap_att", "swap", "overall", "swap_att_acc", "swap_att_n", "swap_att_n_missing"}
    assert one["metrics"]["swap"] == one["metrics"]["swap_att"]["acc"] == one["metrics"]["swap_att_acc"]  # the split flat too
    missing = json.loads((tmp_path / "a" / "winoground.json").read_text())
    assert missing["complete"] is False and "winoground/data/test-*.parquet" in missing["lacks"]
    assert "huggingface-cli download facebook/winoground" in missing["lacks"]  # where the official download goes
    assert list((tmp_path / "cache").glob("*/images-*.safetensors"))  # the second run read these
    rep = run("report", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr[-2000:]
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| a |" in text and "| b |" in text and "SC++ swap ITT" in text
    assert (tmp_path / "report" / "sugarcrepe.png").stat().st_size > 1000
    assert (tmp_path / "report" / "summary.png").stat().st_size > 1000
    import pandas as pd

    summary = pd.read_csv(tmp_path / "report" / "summary.csv", index_col="model")
    add = json.loads((tmp_path / "a" / "sugarcrepe.json").read_text())["metrics"]["add"] * 100
    assert summary.loc["a", "SC add"] == pytest.approx(add, abs=0.01)
    assert summary["average of the 10"].isna().all()  # no zero-shot or retrieval results: no average
    check = run("data", "check")
    assert "sugarcrepe: ready" in check.stdout and "winoground: looked for " in check.stdout


BENCH_PATH = os.environ.get("COMPCLIP_BENCH_PATH")  # `make test` installs CLIP_benchmark into a folder of its own


def clip_benchmark_command() -> list[str] | None:
    """CLIP_benchmark's command line: installed here (the [bench] extra), in the folder COMPCLIP_BENCH_PATH names (put
    first on the path), or in the environment COMPCLIP_BENCH_PYTHON names."""
    import importlib.util

    if importlib.util.find_spec("clip_benchmark") is not None or BENCH_PATH:
        return [sys.executable, "-m", "clip_benchmark.cli"]
    python = os.environ.get("COMPCLIP_BENCH_PYTHON")
    return [python, "-m", "clip_benchmark.cli"] if python else None


@pytest.mark.skipif(clip_benchmark_command() is None and not os.environ.get("CI"), reason="no CLIP_benchmark (`make test` installs it)")
def test_clip_benchmark_build_reads_a_results_folder(data_root, tmp_path):
    """`clip_benchmark build` over compclip's result files: one CSV row each, the model's full name and the scores."""
    assert clip_benchmark_command() is not None, "CI runs `make test`, which installs CLIP_benchmark for this test"
    from compclip.eval import EvalConfig, evaluate
    from compclip.models import load_model, save_checkpoint

    model, _, _ = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    root = tmp_path / "data"
    for colour in ("red", "green", "blue", "yellow", "white", "black"):  # six classes: CLIP_benchmark's acc5 is defined
        (root / "zeroshot" / "colours" / colour).mkdir(parents=True)
        Image.new("RGB", (32, 32), colour).save(root / "zeroshot" / "colours" / colour / "0.png")
    for name in ("sugarcrepe", "coco"):
        (root / name).symlink_to(data_root / name)
    evaluate(EvalConfig(model=str(tmp_path / "ckpt"), benchmark="sugarcrepe/swap_att,zeroshot", out=str(tmp_path / "results"),
                        data_root=str(root), workers=0, device="cpu"))
    result = subprocess.run([*clip_benchmark_command(), "build", str(tmp_path / "results"), "--output", str(tmp_path / "b.csv")],
                            capture_output=True, text=True, env={**os.environ, **({"PYTHONPATH": BENCH_PATH} if BENCH_PATH else {})})
    assert result.returncode == 0, result.stderr[-2000:]
    with open(tmp_path / "b.csv", newline="") as f:
        rows = {r["dataset"]: r for r in csv.DictReader(f)}
    records = {n: json.loads((tmp_path / "results" / f"{n.replace('/', '-')}.json").read_text()) for n in rows}
    assert set(rows) == {"sugarcrepe/swap_att", "zeroshot"}
    assert rows["zeroshot"]["model_fullname"] == f"{tmp_path / 'ckpt'} "  # model, a space, and pretrained: "" for a checkpoint
    for key in ("acc1", "acc5", "mean_per_class_recall"):
        assert float(rows["zeroshot"][key]) == pytest.approx(records["zeroshot"]["metrics"][key])
    assert float(rows["sugarcrepe/swap_att"]["overall"]) == pytest.approx(records["sugarcrepe/swap_att"]["metrics"]["overall"])
    # a split's figures are numbers in their own columns, as CLIP_benchmark's own metrics are
    assert float(rows["sugarcrepe/swap_att"]["swap_att_acc"]) == pytest.approx(records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"])
    assert int(rows["sugarcrepe/swap_att"]["swap_att_n"]) == 666 and float(rows["zeroshot"]["colours_acc5"]) == pytest.approx(
        records["zeroshot"]["metrics"]["colours"]["acc5"])


def test_blind_equals_the_score_of_a_model_whose_image_tower_is_ignored(data_root, tmp_path):
    """An image tower that gives one embedding for every image scores by its texts alone: --blind changes nothing, and the
    report's image-grounded part is 0 on every split."""
    from compclip.eval import EvalConfig, build_report, evaluate
    from compclip.models import load_model, save_checkpoint

    model, _, _ = load_model("compclip-tiny-clip")
    with torch.no_grad():  # a final norm of zero gain: every image pools to its bias
        model.visual.ln_post.weight.zero_()
        model.visual.ln_post.bias.copy_(torch.randn(64, generator=torch.Generator().manual_seed(3)))
    save_checkpoint(model, tmp_path / "ckpt")
    records = evaluate(EvalConfig(model=str(tmp_path / "ckpt"), benchmark="sugarcrepe/swap_att,sugarcrepe_pp/swap_att",
                                  out=str(tmp_path / "a"), data_root=str(data_root), workers=0, device="cpu", blind=True))
    for record in records.values():
        assert record["blind"] == record["metrics"]
    assert 0.3 < records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"] < 0.9  # a text prior: not chance, not all
    text = build_report([tmp_path / "a"], tmp_path / "report").read_text()
    assert "## sugarcrepe-swap_att: what the texts alone score" in text and "| a | 0.0 |" in text


def test_a_full_disk_at_the_items_leaves_no_result_without_them_and_a_rerun_writes_both(tmp_path, capsys):
    """The items file is written before the result, which comes last: where the disk takes the small result JSON but not
    its larger items file (here a file-size limit of 4 KiB, EFBIG, as a nearly full disk refuses the one and not the
    other), `eval` stops in one line naming the items file and writes no result; run again with room, both are there
    and the items are the result's (one row per caption and per image, its recall counted from them)."""
    import resource

    import pandas as pd

    from conftest import run_main
    from test_cluster import retrieval_data

    retrieval_data(tmp_path / "data")
    out = tmp_path / "results"
    evaluate = ("eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval", "--data-root", tmp_path / "data", "--out", out,
                "--workers", 0, "--device", "cpu")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # Python ignores SIGXFSZ: a write past it fails with EFBIG
    try:
        code, _, err = run_main(capsys, *evaluate)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 2 and err.splitlines()[-1].startswith(f"error: {out / 'retrieval.items.parquet'}: not written: the file would "
                                                         "pass this process's file-size limit"), err
    assert not out.exists()  # no result without its items, no temporary file: the folder the failed run made is gone
    assert run_main(capsys, *evaluate)[0] in (0, None)
    record = json.loads((out / "retrieval.json").read_text())
    items = pd.read_parquet(out / "retrieval.items.parquet")
    assert len(items) == record["metrics"]["tiny"]["images"] + record["metrics"]["tiny"]["captions"] == 8
    caption_queries = items[items["direction"] == "text→image"]
    assert record["metrics"]["tiny"]["image_retrieval_recall@1"] == (caption_queries["rank"] == 0).mean()


def test_summary_average_only_over_all_ten_columns():
    from compclip.eval.report import AVERAGE, SUMMARY, summary_table

    metrics = {
        "sugarcrepe": {"add": 0.9, "replace": 0.8, "swap": 0.7},
        "sugarcrepe_pp": {"replace_itt": 0.6, "replace_tot": 0.5, "swap_itt": 0.4, "swap_tot": 0.3},
        "zeroshot": {"imagenet": {"acc": 0.2, "n": 10}, "overall": 0.1},
        "retrieval": {"mean_recall@5": 0.55},
    }
    full = {bench: {"metrics": m} for bench, m in metrics.items()}
    partial = {**full, "retrieval": {"metrics": {"mean_recall@5": None}}}  # null: not evaluated
    table = summary_table({"full": full, "partial": partial})
    assert list(table.columns) == [*SUMMARY, AVERAGE] and table.index.name == "model"
    assert table.loc["full", AVERAGE] == pytest.approx(100 * (0.9 + 0.8 + 0.7 + 0.6 + 0.5 + 0.4 + 0.3 + 0.2 + 0.1 + 0.55) / 10)
    assert math.isnan(table.loc["partial", "retrieval R@5"]) and math.isnan(table.loc["partial", AVERAGE])


def test_zeroshot_class_weights_are_renormalised_after_the_prompt_mean(tiny, tmp_path):
    """CLIP_benchmark's zero_shot_classifier: each prompt's embedding normalised, their mean normalised again. Classes whose
    prompts embed apart (so their means have different norms) score as the written-out classifier scores them."""
    from compclip.eval import DualEncoderScorer

    model, preprocess, tokenizer = tiny
    files = []
    for k, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200), (200, 200, 30)]):
        files.append(tmp_path / f"{k}.png")
        Image.new("RGB", (40, 32), colour).save(files[-1])
    prompts = [["a red thing"], ["a photo of a green dog", "GREEN!!", "a small cube of green glass on a table"],
               ["blue", "blue blue blue"]]
    scorer = DualEncoderScorer(model, preprocess, tokenizer, workers=0)
    with torch.no_grad():
        means = [F.normalize(model.encode_text(tokenizer(p)), dim=-1).mean(0) for p in prompts]
        norms = [float(m.norm()) for m in means]
        weights = torch.stack([m / m.norm() for m in means])
        images = F.normalize(model.encode_image(torch.stack([preprocess(Image.open(f).convert("RGB")) for f in files])), dim=-1)
    assert max(norms) - min(norms) > 0.01  # the means differ in norm: an unnormalised mean would score otherwise
    assert torch.allclose(scorer.class_scores(files, prompts), images @ weights.T, atol=1e-5)


def test_the_embedding_cache_keeps_precisions_apart_and_sees_an_image_rewritten_at_its_size(tiny, tmp_path):
    """An entry written at fp32 is not read at bf16 (each precision its own folder); an image replaced by another of the
    same byte size is encoded again (its modification time is part of the key)."""
    from compclip.eval import DualEncoderScorer

    for name, colour in (("a.png", (200, 30, 30)), ("b.png", (30, 30, 200))):
        Image.new("RGB", (32, 32), colour).save(tmp_path / name)
    files = [tmp_path / "a.png", tmp_path / "b.png"]
    fp32 = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path / "cache").images(files)
    again = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path / "cache")
    assert torch.equal(again.images(files), fp32) and again.encoded["images"] == 0
    bf16 = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path / "cache", precision="amp_bf16")
    low = bf16.images(files)
    assert bf16.encoded["images"] == 2 and not torch.equal(low, fp32) and torch.allclose(low, fp32, atol=0.05)
    assert sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "cache").iterdir()) == ["amp_bf16", "fp32"]
    size = files[0].stat().st_size
    Image.new("RGB", (32, 32), (30, 200, 30)).save(files[0])  # green where red was: a solid PNG of the same byte size
    assert files[0].stat().st_size == size
    later = files[0].stat().st_mtime_ns + 1_000_000_000
    os.utime(files[0], ns=(later, later))
    fresh = DualEncoderScorer(*tiny, workers=0, cache_dir=tmp_path / "cache")
    rows = fresh.images(files)
    assert fresh.encoded["images"] == 2 and not torch.equal(rows[0], fp32[0])
    assert torch.equal(rows, DualEncoderScorer(*tiny, workers=0).images(files))


@pytest.mark.parametrize(("ties", "expected"), [("clip_benchmark", 1.0), ("strict", 0.0), ("official", 0.0)])
def test_blind_scores_under_the_tie_rule_the_run_was_given(tmp_path, ties, expected):
    """A split whose true and false captions are the same text ties on every image, blind or not: the blind score follows
    --ties as the real one does (CLIP_benchmark's rule gives the tie to the caption listed first; SugarCrepe's own, strict,
    counts it wrong)."""
    from compclip.eval import EvalConfig, evaluate

    root = tmp_path / "data"
    (root / "coco" / "val2017").mkdir(parents=True)
    (root / "sugarcrepe").mkdir()
    rows = {}
    for i, colour in enumerate(("red", "blue")):
        Image.new("RGB", (32, 32), colour).save(root / "coco" / "val2017" / f"{i}.jpg")
        rows[str(i)] = {"filename": f"{i}.jpg", "caption": f"a {colour} car", "negative_caption": f"a {colour} car"}
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps(rows))
    records = evaluate(EvalConfig(model="compclip-tiny-clip", benchmark="sugarcrepe/swap_att", out=str(tmp_path / "out"),
                                  data_root=str(root), workers=0, device="cpu", blind=True, ties=ties))
    record = records["sugarcrepe/swap_att"]
    assert record["ties"] == ("strict" if ties == "official" else ties)
    assert record["metrics"]["swap_att"]["acc"] == record["blind"]["swap_att"]["acc"] == expected


def test_each_report_column_reads_the_metric_it_names():
    """The report's columns as each benchmark declares them, against the C2LIP paper's Table 2 headers and the demo's,
    written out here: a column that read another split's number would go unseen in a table of plausible percentages."""
    from compclip.eval.report import SUMMARY, columns

    assert columns() == {
        "SC add": ("sugarcrepe", ("add",)), "SC replace": ("sugarcrepe", ("replace",)), "SC swap": ("sugarcrepe", ("swap",)),
        "SC swap-att": ("sugarcrepe", ("swap_att",)),
        "SC++ replace ITT": ("sugarcrepe_pp", ("replace_itt",)), "SC++ replace TOT": ("sugarcrepe_pp", ("replace_tot",)),
        "SC++ swap ITT": ("sugarcrepe_pp", ("swap_itt",)), "SC++ swap TOT": ("sugarcrepe_pp", ("swap_tot",)),
        "SC++ ITT": ("sugarcrepe_pp", ("overall_itt",)), "SC++ TOT": ("sugarcrepe_pp", ("overall_tot",)),
        "ImageNet": ("zeroshot", ("imagenet",)), "zero-shot mean": ("zeroshot", ("overall",)), "ZS shape": ("zeroshot", ("shape",)),
        "ZS colour": ("zeroshot", ("color",)), "retrieval R@1": ("retrieval", ("mean_recall@1",)),
        "retrieval R@5": ("retrieval", ("mean_recall@5",))}
    assert set(SUMMARY) <= set(columns())


def test_eval_of_a_run_folder_before_its_first_checkpoint_says_so(tmp_path, capsys):
    """A run folder whose config.json is the run's options (written at its first step) and that has no checkpoints/ yet,
    without the train.log a run of this compclip writes beside it (copied without it, or from an earlier compclip): it
    said "config.json: missing keys [...]", the run's record read as a checkpoint's. Now one error line naming the
    folder, saying that training has saved nothing yet and what to do, before any data is read."""
    import dataclasses

    from compclip.errors import MissingFileError
    from compclip.models import load_model
    from compclip.train.config import TrainConfig
    from conftest import run_main

    run = tmp_path / "runs" / "c2lip"
    run.mkdir(parents=True)
    options = TrainConfig(train_data=str(tmp_path / "train.csv"), out=str(run), method="clip", model="compclip-tiny-clip", save_every=200)
    (run / "config.json").write_text(json.dumps(dataclasses.asdict(options)))
    (run / "log.jsonl").write_text("")
    said = (f"{run}: a run folder with no checkpoint yet (its config.json holds the run's options, and training has saved no "
            "checkpoint): use it once checkpoints/ holds one (this run saves every 200 steps), or give a checkpoint folder")
    code, _, err = run_main(capsys, "eval", "--model", run, "--benchmark", "sugarcrepe", "--data-root", tmp_path, "--out",
                            tmp_path / "results", "--device", "cpu")
    assert code == 2 and [line for line in err.splitlines() if line.startswith("error: ")] == [f"error: {said}"], err
    assert not any((tmp_path / "results").glob("*.json"))
    with pytest.raises(MissingFileError) as raised:
        load_model(run)
    assert str(raised.value) == said
    for form in ("open_clip", "hf"):  # export reads the folder's config itself: the same line, not "missing keys"
        code, _, err = run_main(capsys, "export", run, tmp_path / form, "--format", form)
        assert code == 2 and [line for line in err.splitlines() if line.startswith("error: ")] == [f"error: {said}"], err


def test_a_mistyped_model_is_one_line_naming_the_nearest_ids_and_leaves_no_results_folder(tmp_path, capsys):
    """`negclip-b23` for `negclip-b32`: the registry's ids are among the names suggested, and the results folder the run
    made is gone again, so `compclip report results/*` meets no empty folder; a folder that was there stays."""
    from conftest import run_main

    (tmp_path / "data").mkdir()
    command = ["eval", "--model", "negclip-b23", "--benchmark", "sugarcrepe", "--data-root", tmp_path / "data", "--out"]
    code, _, err = run_main(capsys, *command, tmp_path / "results" / "negclip")
    assert code == 2 and len(err.splitlines()) == 1 and "(did you mean negclip-b32" in err
    assert "`compclip models` the released checkpoints' ids" in err
    assert not (tmp_path / "results" / "negclip").exists()
    (tmp_path / "kept").mkdir()
    assert run_main(capsys, *command, tmp_path / "kept")[0] == 2 and (tmp_path / "kept").is_dir()


def test_a_result_records_its_data_root_and_the_sha256_of_each_file_it_read(two_models, swap_root):
    """`compclip.evaluate` on SugarCrepe's and SugarCrepe++'s swap_att: each result records the data root once, absolute,
    and the SHA-256 of the annotation file it read (hashlib's, of the shared release files), not of its images; its items
    name their images relative to that root."""
    import hashlib

    import pandas as pd

    for bench in ("sugarcrepe", "sugarcrepe_pp"):
        record = json.loads((two_models / "base" / f"{bench}-swap_att.json").read_text())
        official = hashlib.sha256(shared_data(bench, "swap_att.json").read_bytes()).hexdigest()
        assert record["data_root"] == str(swap_root.resolve()) and record["files"] == {f"{bench}/swap_att.json": official}
        images = pd.read_parquet(two_models / "base" / f"{bench}-swap_att.items.parquet")["image"]
        assert all(image.startswith("coco/val2017/") and (swap_root / image).is_file() for image in images)
