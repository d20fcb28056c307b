"""The base compclip ships for the demo's default world: installed where (and only where) the demo would pretrain that very
base, intact, reading every token of its world, and meeting the base's targets on that world's held-out-free test split."""
import json

import pytest
import torch

from compclip.demo import (
    CURRICULUM,
    PRETRAIN_BATCH,
    PRETRAIN_STEPS,
    SHIPPED_BASE,
    DemoConfig,
    pretrain_base,
    shipped_fits,
    shipped_record,
    world_config,
    world_token_ids,
)
from compclip.errors import UsageError
from compclip.eval import EvalConfig, evaluate
from compclip.models import load_model
from compclip.world import generate


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    train = tmp_path_factory.mktemp("demo") / "train"
    demo = DemoConfig()
    final, how = pretrain_base(train, None, world_config(None, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS,
                               {"batch_size": PRETRAIN_BATCH}, rebuild=False)
    return final, how


def test_the_demo_installs_the_shipped_base_for_its_default_world_only(installed, tmp_path):
    final, how = installed
    assert how.startswith("shipped with compclip") and final.name == f"step_{CURRICULUM[-1][-1]:07d}"
    record = shipped_record()
    assert json.loads((final / "config.json").read_text())["shipped"]["sha256"] == record["sha256"]
    demo = DemoConfig()
    assert shipped_fits(world_config(None, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS)
    assert not shipped_fits(world_config(None, 1, demo.n_train, demo.n_test), PRETRAIN_STEPS)  # another draw of the world
    assert not shipped_fits(world_config({"heldout": 0.5}, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS)
    assert not shipped_fits(world_config(None, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS // 2)
    assert not shipped_fits(world_config(None, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS, PRETRAIN_BATCH // 2)
    with pytest.raises(UsageError, match="holds the shipped base"):
        pretrain_base(final.parents[2], None, world_config(None, 0, demo.n_train, demo.n_test), PRETRAIN_STEPS,
                      {"batch_size": PRETRAIN_BATCH}, rebuild=True)


def test_a_damaged_shipped_base_is_refused(tmp_path, monkeypatch):
    import shutil

    import compclip.demo as demo_module
    from compclip.errors import DataError

    copy = tmp_path / "shipped"
    shutil.copytree(SHIPPED_BASE, copy)
    record = json.loads((copy / "shipped.json").read_text())
    (copy / "shipped.json").write_text(json.dumps({**record, "sha256": "0" * 64}))
    monkeypatch.setattr(demo_module, "SHIPPED_BASE", copy)
    with pytest.raises(DataError, match="damaged"):
        demo_module.install_base(tmp_path / "base")
    assert not (tmp_path / "base").exists()


def test_the_shipped_base_reads_every_token_of_its_world_and_meets_the_base_targets(installed, tmp_path):
    """A small draw of the same world (seed 0: the same held-out pairings, the same first test images): every token of its
    texts has a trained (non-zero) embedding row but the words of negation that CoN-CLIP's negated captions brought
    (world format 6, after the base was packed: a CoN-CLIP fine-tune trains their rows from zero), no other row is kept,
    and zero-shot shape and colour on its seen split meet the base's targets (>= 95 and >= 98 %)."""
    final, _ = installed
    model, _, tokenizer = load_model(str(final))
    world = generate(tmp_path / "world", world_config({"n_singles": 50}, 0, 50, 400), workers=2)
    rows = model.text.token_embedding.weight.detach()
    kept = set((rows != 0).any(1).nonzero().flatten().tolist())
    negation = set(tokenizer(["but no"]).unique().tolist())
    assert world_token_ids(world, tokenizer) - kept == negation - kept != set()
    assert len(kept) == shipped_record()["tokens_read"]
    evaluate(EvalConfig(str(final), "zeroshot", str(tmp_path / "results"), data_root=str(world / "test_seen"), device="cpu",
                        precision="fp32", workers=2))
    metrics = json.loads((tmp_path / "results" / "zeroshot.json").read_text())["metrics"]
    assert metrics["shape"]["acc"] >= 0.95 and metrics["color"]["acc"] >= 0.98, metrics
    assert torch.isfinite(rows).all()


def test_packing_a_base_changes_no_feature_of_its_world(tmp_path, monkeypatch):
    """`pack_base` on a randomly initialised demo model (every token row non-zero) over a small world: the installed copy
    gives the very same features for the world's captions, its swap-attribute pairs, its zero-shot prompts and its images, and
    keeps only the rows those texts read."""
    import compclip.demo as demo_module
    from compclip.demo import MODEL, install_base, pack_base
    from compclip.models import save_checkpoint

    model, _, tokenizer = load_model(MODEL)
    source = save_checkpoint(model, tmp_path / "source", method="siglip", step=1, train_args={"batch_size": 16})
    world = generate(tmp_path / "world", world_config({"n_singles": 20}, 0, 20, 40), workers=2)
    record = pack_base(source, world, "0000000", dest=tmp_path / "shipped")
    monkeypatch.setattr(demo_module, "SHIPPED_BASE", tmp_path / "shipped")
    packed, _, _ = load_model(str(install_base(tmp_path / "installed")))

    texts = [json.loads(line)["caption"] for line in (world / "train" / "scenes.jsonl").read_text().splitlines()]
    for pair in json.loads((world / "test_seen" / "sugarcrepe" / "swap_att.json").read_text()).values():
        texts += [pair["caption"], pair["negative_caption"]]
    for task in (world / "test_seen" / "zeroshot").iterdir():  # the prompts zero-shot scores: each template with each class
        templates = (task / "templates.txt").read_text().splitlines()
        texts += [t.format(folder.name) for folder in task.iterdir() if folder.is_dir() for t in templates]
    images = torch.rand(4, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(packed.encode_text(tokenizer(texts)), model.encode_text(tokenizer(texts)))
        assert torch.equal(packed.encode_image(images), model.encode_image(images))
        assert not torch.equal(packed.encode_text(tokenizer(["a cat"])), model.encode_text(tokenizer(["a cat"])))
    kept = (packed.text.token_embedding.weight != 0).any(1).sum().item()
    assert kept == record["tokens_read"] < 200 and record["batch_size"] == 16
