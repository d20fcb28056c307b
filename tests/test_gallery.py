"""The error gallery a person looks at (`compclip report --html`), opened in a real headless Chromium: it loads without a
console error, its filters work (set from the page's address), and a screenshot is written in the test's folder."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import run_main, shared_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(*args, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=10000", "--window-size=1280,1600"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=timeout)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]


@pytest.fixture
def gallery(two_models, tmp_path):
    """The two models' results, and room for the reports."""
    for name in ("base", "other"):
        (tmp_path / name).symlink_to(two_models / name)
    return tmp_path


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="no chromium (`make test` installs it)")
def test_the_gallery_loads_in_chromium_and_its_filters_work(gallery, capsys):
    assert CHROMIUM is not None, "CI runs `make test`, which installs Debian's chromium for this test"
    code, _, err = run_main(capsys, "report", gallery / "base", gallery / "other", "--label", "SigLIP", "--label", "C2LIP", "--out",
                              gallery / "report", "--html")
    assert code in (0, None), err
    page = gallery / "report" / "report.html"
    text = page.read_text(encoding="utf-8")
    assert "<script src" not in text and "http" not in text.split("<script>")[1]  # self-contained
    wrong = {m: sum(not r for r in json_items(gallery / f, "sugarcrepe-swap_att")) for m, f in (("SigLIP", "base"), ("C2LIP", "other"))}
    shot = gallery / "report" / "gallery.png"
    loaded = chromium(f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000 and not console_errors(loaded.stderr), loaded.stderr[-3000:]
    dom = chromium("--dump-dom", page.as_uri()).stdout
    cards = dom.count('class="card"')
    assert cards and f'<span id="shown">{cards}</span>' in dom  # every card shown, none filtered
    split = "sugarcrepe-swap_att/swap_att"
    filtered = chromium("--dump-dom", page.as_uri() + f"#split={quote(split, safe='')}&model=C2LIP")
    assert not console_errors(filtered.stderr), filtered.stderr[-3000:]
    visible = [c for c in filtered.stdout.split('<div class="card"')[1:] if not c.split(">", 1)[0].rstrip().endswith("hidden=\"\"")]
    assert len(visible) == wrong["C2LIP"] and all(f'data-split="{split}"' in c and 'data-model="C2LIP"' in c for c in visible)
    assert f'<span id="shown">{wrong["C2LIP"]}</span>' in filtered.stdout
    disagree = chromium("--dump-dom", page.as_uri() + "#disagree=1").stdout
    shown = int(disagree.split('<span id="shown">')[1].split("<")[0])
    assert 0 < shown < cards  # the items the two models answer differently, each model's wrong ones


def json_items(folder, bench):
    import pandas as pd

    return pd.read_parquet(folder / f"{bench}.items.parquet")["correct"].tolist()


def test_the_report_marks_a_paired_difference_and_draws_figures_for_a_paper(gallery, capsys):
    code, _, err = run_main(capsys, "report", gallery / "base", gallery / "other", "--label", "SigLIP", "--label", "C2LIP", "--out",
                            gallery / "figures")
    assert code in (0, None), err
    report = (gallery / "figures" / "report.md").read_text(encoding="utf-8")
    assert "## Paired differences against SigLIP" in report and "**C2LIP**" in report and "| SigLIP |" in report
    for fmt in ("png", "pdf", "svg"):
        assert (gallery / "figures" / f"sugarcrepe-swap_att.{fmt}").stat().st_size > 1000
    svg = (gallery / "figures" / "sugarcrepe-swap_att.svg").read_text()
    assert "n=666" in svg and "chance" in svg and "C2LIP" in svg  # item count, chance line and the names given
    paired = (gallery / "figures" / "paired.csv").read_text().splitlines()
    assert paired[0].startswith("benchmark,split,a,b,n,") and len(paired) == 3
    record = json.loads((gallery / "base" / "sugarcrepe-swap_att.json").read_text())
    assert record["metrics"]["swap_att_acc"] == record["metrics"]["swap_att"]["acc"]
    header = (gallery / "figures" / "sugarcrepe-swap_att.csv").read_text().splitlines()[0]
    assert header == "model,swap_att,swap,overall"  # each number once, under its split: not again as swap_att_acc


def test_eval_reports_to_tensorboard_and_to_wandb_with_a_table_of_the_wrong_items(swap_root, tmp_path):
    """`compclip eval --report-to tensorboard,wandb` as a user runs it, W&B offline (in a process of its own: W&B keeps
    its settings for the life of a process): the numbers, the figure, and a table of the wrong items each with its
    image, as W&B stores them."""
    import sys

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    import compclip
    from compclip.models import load_model, save_checkpoint
    from test_open_clip_habits import wandb_history, wandb_records
    from test_train import env_for_children

    save_checkpoint(load_model("compclip-tiny-clip")[0], tmp_path / "ckpt")
    out = tmp_path / "results"
    env = {**env_for_children(), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_DATA_DIR": str(tmp_path / "wandb-data")}  # where W&B stages a table's media for upload
    done = subprocess.run([sys.executable, "-m", "compclip", "-q", "eval", "--model", str(tmp_path / "ckpt"), "--benchmark",
                           "sugarcrepe/swap_att", "--data-root", str(swap_root), "--out", str(out), "--workers", "0", "--device", "cpu",
                           "--report-to", "tensorboard,wandb"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    acc = json.loads((out / "sugarcrepe-swap_att.json").read_text())["metrics"]["swap_att"]["acc"]
    tb = EventAccumulator(str(out / "tensorboard")).Reload()
    assert tb.Scalars("sugarcrepe-swap_att/swap_att_acc")[0].value == pytest.approx(acc)
    assert "sugarcrepe-swap_att/figure" in tb.Tags()["images"]
    run = next((out / "wandb").glob("offline-run-*"))
    history = next(wandb_history(next(run.glob("run-*.wandb"))))
    assert history["sugarcrepe-swap_att/swap_att_acc"] == pytest.approx(acc)
    assert history["sugarcrepe-swap_att/figure/_type"] == "image-file" and history["wrong_items/_type"] == "table-file"
    table = json.loads((run / "files" / history["wrong_items/path"]).read_text())
    wrong = round((1 - acc) * 666)
    assert table["columns"][:4] == ["benchmark", "split", "item", "image"] and len(table["data"]) == wrong == history["wrong_items/nrows"]
    assert all(row[3] == "Image" for row in table["data"])  # an image in every row, kept in the table's artifact:
    records = b"".join(r.SerializeToString() for r in wandb_records(next(run.glob("run-*.wandb"))))
    manifest = set(re.findall(rb"media/images/[0-9a-f]+/(\w+\.jpg)", records))
    items = compclip.load_items(out)
    wanted = {Path(i).name for i in items[~items["correct"]]["image"]}
    assert {m.decode() for m in manifest} == wanted  # each wrong item's own image file, in the table's artifact
    assert len([p for p in (tmp_path / "wandb-data").rglob("*") if p.is_file()]) >= len(wanted)  # staged for `wandb sync`


def test_a_caption_handed_in_a_results_folder_is_text_on_the_page(tmp_path):
    """Items come from someone's results folder: a caption, model name or image path that is markup stays text."""
    import pandas as pd

    from compclip.eval.gallery import changed_words, write_gallery

    evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    items = pd.DataFrame([{"model": evil, "benchmark": "b", "split": "s", "item": "0", "image": f"{evil}.png", "true": evil,
                           "false": "a red square", "score_true": 0.1, "score_false": 0.2, "correct": False, "tie": False}])
    page = write_gallery(items, tmp_path / "g.html").read_text(encoding="utf-8")
    assert "alert(2)</script>" not in page and 'onerror="alert(1)"' not in page and page.count("<script>") == 1
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert changed_words("a red cube left of a blue ball", "a blue cube left of a red ball") == ["red", "blue"]
    assert changed_words("a dog on a bed", "a cat on a bed") == ["dog"]


def test_an_image_past_pillows_bomb_limit_is_shown_missing_not_decoded(tmp_path):
    """A 20,000 × 20,000 image in someone's results (Pillow refuses it) and a 10,000 × 10,000 one (Pillow warns, and
    decoding it would take 300 MB): each card says the file instead of a thumbnail; the page is written."""
    import pandas as pd
    from PIL import Image

    from compclip.eval.gallery import write_gallery

    Image.new("1", (20_000, 20_000)).save(tmp_path / "huge.png")
    Image.new("1", (10_000, 10_000)).save(tmp_path / "large.png")
    Image.new("RGB", (40, 30), "red").save(tmp_path / "small.png")
    rows = [{"model": "m", "benchmark": "b", "split": "s", "item": str(i), "image": str(tmp_path / name), "true": "a red square",
             "false": "a blue square", "score_true": 0.1, "score_false": 0.2, "correct": False, "tie": False}
            for i, name in enumerate(("huge.png", "large.png", "small.png"))]
    page = write_gallery(pd.DataFrame(rows), tmp_path / "g.html").read_text(encoding="utf-8")
    assert all(f'<div class="noimg">{tmp_path / name}</div>' in page for name in ("huge.png", "large.png"))
    assert page.count("data:image/jpeg;base64,") == 1


def test_the_gallerys_totals_are_each_models_own_items(gallery, tmp_path):
    """The totals table with two models, one of which scored fewer items: each row's count, accuracy and Wilson interval
    are that model's own, read here from its items file and scipy's interval."""
    import pandas as pd
    from scipy.stats import binomtest

    from compclip.eval.gallery import write_gallery
    from compclip.eval.results import items_frame

    items = items_frame([gallery / "base", gallery / "other"])
    dropped = items[(items["model"] == "other") & (items["benchmark"] == "sugarcrepe-swap_att")].index[-10:]
    page = write_gallery(items.drop(index=dropped), tmp_path / "gallery.html").read_text(encoding="utf-8")
    cell = r"</td><td>"
    rows = re.findall(rf"<tr><td>([^<]*){cell}([^<]*){cell}([^<]*){cell}([\d,]+){cell}([\d.]+){cell}\[([\d.]+), ([\d.]+)\]</td></tr>", page)
    assert len(rows) == 4  # two benchmarks' swap_att, two models
    for bench, split_name, model, n, acc, low, high in rows:
        own = pd.read_parquet(gallery / model / f"{bench}.items.parquet")
        correct = own[own["split"] == split_name]["correct"].astype(bool).tolist()
        if (model, bench) == ("other", "sugarcrepe-swap_att"):
            correct = correct[:-10]
        right = sum(correct)
        interval = binomtest(right, len(correct)).proportion_ci(method="wilson")
        assert int(n.replace(",", "")) == len(correct), (bench, model)
        assert float(acc) == pytest.approx(100 * right / len(correct), abs=0.05), (bench, model)
        assert (float(low), float(high)) == pytest.approx((100 * interval.low, 100 * interval.high), abs=0.05), (bench, model)


def test_a_retrieval_miss_shows_the_image_retrieved_instead_and_pairs_across_models(tmp_path):
    """A caption whose query retrieved another image: its card shows both images (its own, the one retrieved), kind
    "retrieval", no words listed as swapped. Two models that retrieved different wrong images still answer the same
    query: their rows pair, and the disagreement view does not count it."""
    import pandas as pd
    import torch
    from PIL import Image

    from compclip.eval.compare import compare
    from compclip.eval.gallery import write_gallery
    from compclip.eval.items import retrieval_rows
    from compclip.eval.protocols import query_ranks

    images = []
    for name, colour in (("red.png", (255, 0, 0)), ("green.png", (0, 255, 0)), ("blue.png", (0, 0, 255))):
        Image.new("RGB", (32, 32), colour).save(tmp_path / name)
        images.append(str(tmp_path / name))
    captions, owner = ["a red square", "a green square", "a blue square"], torch.tensor([0, 1, 2])

    def rows(model, scores):
        positives = owner[:, None] == torch.arange(3)[None, :]
        ranks = query_ranks(scores, positives, "strict"), query_ranks(scores.T, positives.T, "strict")
        return pd.DataFrame(retrieval_rows("set", images, captions, owner, scores, ranks)).assign(model=model, run=0, benchmark="retrieval")

    # (captions, images): A finds the red square's caption the green image, B the blue one; both right elsewhere
    a = rows("A", torch.tensor([[0.2, 0.9, 0.1], [0.0, 1.0, 0.1], [0.0, 0.1, 1.0]]))
    b = rows("B", torch.tensor([[0.2, 0.1, 0.9], [0.0, 1.0, 0.1], [0.0, 0.1, 1.0]]))
    page = write_gallery(pd.concat([a, b], ignore_index=True), tmp_path / "g.html").read_text(encoding="utf-8")
    cards = [c for c in page.split('<div class="card"')[1:] if "item caption 0" in c]
    assert len(cards) == 2 and all('data-kind="retrieval"' in c and 'data-words=""' in c for c in cards)
    assert all(c.count('class="thumb t') == 2 for c in cards)  # its own image and the one retrieved
    assert all('data-disagree="0"' in c for c in cards)  # both missed that query: no disagreement
    d, = [d for d in compare(pd.concat([a, b]), "A", "B", resamples=200) if d.split == "set"]
    assert (d.n, d.a_only, d.b_only) == (6, 0, 0)  # six queries paired, the caption-0 miss on both sides


def test_a_cards_kind_is_the_benchmarks_own_where_it_sorts_its_splits_and_the_words_otherwise(tmp_path):
    """SugarCrepe's replace_att changes an attribute even where spaCy tags the word a noun ("a brick wall" → "a glass
    wall": a material): its card says attribute, as the split does, here run whole and one split alone; the same change
    in a benchmark that sorts nothing is told by spaCy's tag of the word (a noun: object)."""
    import pandas as pd

    from compclip.eval.gallery import write_gallery

    row = {"model": "m", "split": "replace_att", "image": "x.png", "true": "a brick wall next to a road",
           "false": "a glass wall next to a road", "score_true": 0.1, "score_false": 0.2, "correct": False, "tie": False}
    items = pd.DataFrame([{**row, "benchmark": bench, "item": str(i)}
                          for i, bench in enumerate(("sugarcrepe", "sugarcrepe-replace_att", "sugarcrepe_pp", "mine"))])
    page = write_gallery(items, tmp_path / "g.html").read_text(encoding="utf-8")
    kinds = dict(re.findall(r'data-split="([^"/]+)/replace_att" data-kind="(\w+)"', page))
    assert kinds == {"sugarcrepe": "attribute", "sugarcrepe-replace_att": "attribute", "sugarcrepe_pp": "attribute", "mine": "object"}
    # the other benchmarks whose authors sort their false captions by kind, as their items name the split
    declared = {("vl_checklist", "Attribute/color/vaw"): "attribute", ("vl_checklist", "Object/Size/vg_size/vg_obj_large"): "object",
                ("vl_checklist", "Relation/spatial/vg_spatial"): "relation", ("aro_vg_relation", ""): "relation",
                ("aro_vg_attribution", ""): "attribute", ("whatsup", "controlled_a"): "relation", ("aro_order", "coco_order"): "object"}
    items = pd.DataFrame([{**row, "benchmark": bench, "split": split, "item": str(i)} for i, (bench, split) in enumerate(declared)])
    page = write_gallery(items, tmp_path / "g.html").read_text(encoding="utf-8")
    assert {tuple(k.split("/", 1)): v for k, v in re.findall(r'data-split="([^"]+)" data-kind="(\w+)"', page)} == declared


def test_a_page_of_benchmarks_that_declare_their_kinds_and_retrieval_misses_never_loads_spacy(tmp_path):
    """spaCy's parse (seconds for thousands of captions) is for the captions whose kind nothing else says: a page of
    SugarCrepe, What'sUp and retrieval misses is built without importing it."""
    import subprocess
    import sys

    code = f"""
import sys
import pandas as pd
from compclip.eval.gallery import write_gallery
row = dict(model="m", image="x.png", true="a dog on a mat", false="a dog under a mat", score_true=0.1, score_false=0.2,
           correct=False, tie=False)
items = pd.DataFrame([{{**row, "benchmark": "sugarcrepe", "split": "swap_att", "item": "0"}},
                      {{**row, "benchmark": "whatsup", "split": "controlled_a", "item": "0"}},
                      {{**row, "benchmark": "retrieval", "split": "coco", "item": "caption 0", "direction": "text→image"}}])
from pathlib import Path
page = write_gallery(items, Path({str(tmp_path / "g.html")!r})).read_text(encoding="utf-8")
assert page.count('class="card"') == 3 and 'data-kind="retrieval"' in page, page
print("spacy" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_thumbnail_is_the_photo_at_128_pixels_as_a_full_decode_would_make_it(tmp_path):
    """A COCO-sized JPEG is decoded at a reduced scale (Pillow's `draft`) for speed: its thumbnail keeps the photo's
    shape, 128 pixels on its long side, and differs little from one made from the full decode."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    from compclip.eval.gallery import thumbnail

    photo = sorted(shared_data("flickr8k_1k", "images").glob("*.jpg"))[0]
    for size, suffix in (((640, 480), ".jpg"), ((300, 1000), ".jpg"), ((2000, 1500), ".jpg"), ((100, 60), ".png")):
        path = tmp_path / f"{size[0]}x{size[1]}{suffix}"
        Image.open(photo).convert("RGB").resize(size, Image.Resampling.BICUBIC).save(path, quality=95)
        url = thumbnail(str(path))
        made = Image.open(io.BytesIO(base64.b64decode(url.removeprefix("data:image/jpeg;base64,")))).convert("RGB")
        reference = Image.open(path).convert("RGB")  # decoded whole, then stored as the page stores it (JPEG, quality 75)
        reference.thumbnail((128, 128))
        buffer = io.BytesIO()
        reference.save(buffer, "JPEG", quality=75)
        reference = Image.open(buffer).convert("RGB")
        assert made.size == reference.size and max(made.size) == min(128, max(size)), (size, made.size)
        difference = np.abs(np.asarray(made, dtype=float) - np.asarray(reference, dtype=float)).mean()
        assert difference < 5, (size, difference)  # of 255: the same picture (3.5 at COCO's size, from its 1/4 scale)


def test_the_gallery_leads_with_the_benchmarks_items_and_a_retrieval_miss_says_what_it_retrieved(tmp_path):
    """Retrieval's results come first in a results folder (files sorted by name) and give hundreds of misses a model:
    the page shows a benchmark's items before them. A caption that retrieved another image says that image's captions
    (every caption query names its own image), not the image's file name."""
    import pandas as pd
    import torch
    from PIL import Image

    from compclip.eval.gallery import write_gallery
    from compclip.eval.items import retrieval_rows
    from compclip.eval.protocols import query_ranks

    images = []
    for name, colour in (("red.png", (255, 0, 0)), ("green.png", (0, 255, 0))):
        Image.new("RGB", (32, 32), colour).save(tmp_path / name)
        images.append(str(tmp_path / name))
    captions, owner = ["a red square", "a scarlet tile", "a green square", "a lime tile"], torch.tensor([0, 0, 1, 1])
    scores = torch.tensor([[0.2, 0.9], [0.8, 0.1], [0.0, 1.0], [0.1, 0.9]])  # (captions, images): caption 0 finds the green image
    positives = owner[:, None] == torch.arange(2)[None, :]
    ranks = query_ranks(scores, positives, "strict"), query_ranks(scores.T, positives.T, "strict")
    retrieval = pd.DataFrame(retrieval_rows("set", images, captions, owner, scores, ranks)).assign(model="m", benchmark="retrieval")
    choice = pd.DataFrame([{"model": "m", "benchmark": "sugarcrepe", "split": "swap_att", "item": "7", "image": images[0],
                            "true": "a red cube left of a blue ball", "false": "a blue cube left of a red ball", "score_true": 0.1,
                            "score_false": 0.2, "correct": False, "tie": False}])
    page = write_gallery(pd.concat([retrieval, choice], ignore_index=True), tmp_path / "g.html").read_text(encoding="utf-8")
    cards = page.split('<div class="card"')[1:]
    assert 'data-split="sugarcrepe/swap_att"' in cards[0] and all('data-kind="retrieval"' in c for c in cards[1:])
    assert re.findall(r"<tr><td>(\w+)</td>", page) == ["sugarcrepe", "retrieval"]  # the totals in the cards' order
    miss, = [c for c in cards if "item caption 0" in c]
    wrong = miss.split('<div class="false">')[1]
    assert wrong.startswith(f"✗ {captions[2]} / {captions[3]} ") and "green.png" not in wrong  # the green image's two captions


def test_a_sugarcrepe_pp_cards_changed_words_are_the_negatives_against_the_caption_it_was_made_from(tmp_path):
    """SugarCrepe++ offers a caption, its paraphrase and a negative made from the caption; its `true` is the weaker of
    the two true ones, here the paraphrase. The card's changed words are the negative's swap of the caption (red, blue),
    not every word the paraphrase has and the negative lacks."""
    import pandas as pd

    from compclip.eval.gallery import write_gallery

    caption, paraphrase = "a red cube left of a blue ball", "there is a red cube and it is left of the blue ball"
    negative = "a blue cube left of a red ball"
    items = pd.DataFrame([{"model": "m", "benchmark": "sugarcrepe_pp", "split": "swap_att", "item": "0", "image": "x.png",
                           "true": paraphrase, "false": negative, "score_true": 0.1, "score_false": 0.3, "correct": False,
                           "tie": False, "texts": [caption, paraphrase, negative], "scores": [0.2, 0.1, 0.3]}])
    page = write_gallery(items, tmp_path / "g.html").read_text(encoding="utf-8")
    assert 'data-words="red blue"' in page and "attribute: red, blue" in page
    assert f"made from: {caption}" in page  # the caption the words are read against, beside the paraphrase


def test_the_html_report_shows_the_reports_figures(gallery, capsys):
    """`compclip report --html`: each figure the report drew (its PNGs) is in the page itself, byte for byte, above the
    first item."""
    import base64

    code, _, err = run_main(capsys, "report", gallery / "base", gallery / "other", "--out", gallery / "report", "--html")
    assert code in (0, None), err
    page = (gallery / "report" / "report.html").read_text(encoding="utf-8")
    shown = [base64.b64decode(d) for d in re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)]
    drawn = sorted((gallery / "report").glob("*.png"))
    assert len(drawn) == 3 and sorted(shown) == sorted(p.read_bytes() for p in drawn)  # summary and the two benchmarks'
    assert page.index("<img src=") < page.index('<div class="card"')


@pytest.fixture
def evaluated_here(tmp_path, capsys, monkeypatch):
    """Results of `compclip eval --data-root data` run in a folder of its own, the data root given relative to it (as a
    user types it), 24 SugarCrepe swap-att items on images of a colour each: (the results folder, the data root)."""
    from test_papers import swap_att_root

    here = tmp_path / "eval-here"
    root = swap_att_root(here / "data", n=24)
    monkeypatch.chdir(here)
    code, _, err = run_main(capsys, "-q", "eval", "--model", "compclip-tiny-clip", "--benchmark", "sugarcrepe/swap_att", "--data-root",
                            "data", "--out", "results", "--workers", "0", "--device", "cpu")
    assert code in (0, None), err
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return here / "results", root


def wrong_images(results, root):
    """Each wrong item's image file, by item, as the data root and the items file name them."""
    import pandas as pd

    items = pd.read_parquet(results / "sugarcrepe-swap_att.items.parquet")
    return {item: root / image for item, image, ok in zip(items["item"], items["image"], items["correct"], strict=True) if not ok}


def card_thumbnails(page: str) -> dict[str, str]:
    """Each card's item and the data URL of its thumbnail (None: the card names a file instead)."""
    urls = dict(re.findall(r'\.(t\d+) \{ background-image: url\("([^"]+)"\); \}', page))
    found = {}
    for card in page.split('<div class="card"')[1:]:
        item = re.search(r" · item (\S+) · ", card).group(1)
        thumb = re.search(r'class="thumb (t\d+)"', card)
        found[item] = urls[thumb.group(1)] if thumb else None
    return found


def test_a_report_run_from_another_folder_shows_every_image(evaluated_here, capsys):
    """`compclip eval --data-root data` in one folder, `compclip report --html` in another: every wrong item's card shows
    its own image, embedded (its thumbnail's colour is the image file's), none its path instead; the result records the
    data root, absolute, once."""
    import base64
    import io

    from PIL import Image

    results, root = evaluated_here
    code, _, err = run_main(capsys, "report", results, "--out", "report", "--html")
    assert code in (0, None), err
    page = Path("report", "report.html").read_text(encoding="utf-8")
    wrong = wrong_images(results, root)
    shown = card_thumbnails(page)
    assert wrong and set(shown) == set(wrong) and 'class="noimg"' not in page and "not found" not in err
    for item, url in shown.items():
        thumb = Image.open(io.BytesIO(base64.b64decode(url.removeprefix("data:image/jpeg;base64,")))).convert("RGB")
        colour = Image.open(wrong[item]).convert("RGB").getpixel((0, 0))
        assert max(abs(a - b) for a, b in zip(thumb.getpixel((5, 5)), colour, strict=True)) < 8, item
    assert json.loads((results / "sugarcrepe-swap_att.json").read_text())["data_root"] == str(root.resolve())


def test_images_not_found_are_counted_in_one_warning_and_report_data_root_finds_them_moved(evaluated_here, capsys):
    """The data moved after `compclip eval`: the report warns once, counting the images it could not find, and their cards
    say "not found"; `--data-root` where the data lies now shows every one again."""
    results, root = evaluated_here
    moved = root.rename(root.with_name("moved"))
    code, _, err = run_main(capsys, "report", results, "--out", "report", "--html")
    assert code in (0, None), err
    wrong = wrong_images(results, moved)
    warned = [line for line in err.splitlines() if "not found" in line]
    assert len(warned) == 1 and f"{len(wrong)} of the {len(wrong)} images shown not found" in warned[0], err
    page = Path("report", "report.html").read_text(encoding="utf-8")
    assert page.count('<div class="noimg">not found: ') == len(wrong) and set(card_thumbnails(page).values()) == {None}
    code, _, err = run_main(capsys, "report", results, "--out", "again", "--html", "--data-root", moved)
    assert code in (0, None) and "not found" not in err, err
    page = Path("again", "report.html").read_text(encoding="utf-8")
    assert 'class="noimg"' not in page and None not in card_thumbnails(page).values() and len(card_thumbnails(page)) == len(wrong)


def test_report_data_root_over_an_older_result_says_in_one_line_it_cannot_re_root_it(evaluated_here, capsys):
    """A result of an older compclip (no data root recorded, each item's image as that run found it), its data moved:
    `--data-root` cannot re-root its images, and one warning says so, naming the result, instead of passing over the
    option as if it had found them."""
    import pandas as pd

    results, root = evaluated_here
    record = results / "sugarcrepe-swap_att.json"
    older = {k: v for k, v in json.loads(record.read_text()).items() if k not in ("data_root", "files")}
    record.write_text(json.dumps(older))
    items_file = results / "sugarcrepe-swap_att.items.parquet"
    items = pd.read_parquet(items_file)
    items.assign(image=[str(root.resolve() / image) for image in items["image"]]).to_parquet(items_file)
    moved = root.rename(root.with_name("moved"))
    code, _, err = run_main(capsys, "report", results, "--out", "report", "--html", "--data-root", moved)
    assert code in (0, None), err
    said = [line for line in err.splitlines() if "record no data root" in line]
    assert len(said) == 1 and f"--data-root {moved}: 1 result(s)" in said[0] and str(record) in said[0], err
    code, _, err = run_main(capsys, "report", results, "--out", "again", "--html")
    assert code in (0, None) and "record no data root" not in err, err
