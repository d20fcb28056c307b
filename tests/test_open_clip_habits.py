"""open_clip_train's flags under their names (or an error naming compclip's), and evaluation during training: real runs
of the tiny models, two torchrun processes, TensorBoard's event file and W&B's offline run folder read back."""
import json
import math
import subprocess
import sys

import pytest
import torch
from PIL import Image

from conftest import run_main, run_tree, shared_data
from test_train import compclip, env_for_children, free_port, logged, make_dataset, settings_config


def test_open_clip_names_are_aliases_and_other_meanings_name_compclips_flag(tmp_path, capsys):
    data = make_dataset(tmp_path, n=16)
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--out", tmp_path / "run", "--steps", "1", "--batch-size", "8", "--workers", "0", "--opt", "adamw",
                            "--lr-scheduler", "const", "--csv-img-key", "image", "--csv-caption-key", "caption",
                            "--log-every-n-steps", "1")
    assert code == 0, err
    args = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (args["optimizer"], args["schedule"]) == ("adamw", "const")
    for flag, compclips in (("--save-frequency", "--save-every"), ("--zeroshot-frequency", "--eval-benchmarks zeroshot"),
                            ("--siglip", "--method siglip"), ("--delete-previous-checkpoint", "--keep 1")):
        code, _, err = run_main(capsys, "train", f"{flag}=1" if "frequency" in flag else flag, "--method", "siglip")
        assert code == 2 and f"{flag} is open_clip_train's flag" in err and compclips in err, err


def test_every_flag_of_open_clip_trains_is_compclips_or_says_what_compclip_does_instead(capsys):
    """open_clip_train's whole parser (its `params.parse_args`, read from the installed package): each flag is a flag of
    `compclip train` (its own name or an alias), or is answered in one line that names what compclip does instead,
    never click's bare "No such option"."""
    import argparse

    import typer.main
    from open_clip_train import params

    from compclip.cli import app

    built = {}
    parse = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = lambda self, args=None, ns=None: built.setdefault("parser", self) and parse(self, [], ns)
    try:
        params.parse_args([])
    finally:
        argparse.ArgumentParser.parse_args = parse
    theirs = {o for a in built["parser"]._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
    train = typer.main.get_command(app).commands["train"]
    ours = {o for p in train.params for o in (*p.opts, *p.secondary_opts)}
    assert len(theirs) > 80
    for flag in sorted(theirs - ours):
        code, _, err = run_main(capsys, "train", flag)
        assert code == 2 and err.startswith(f"error: {flag} is open_clip_train's flag: ") and len(err.strip().splitlines()) == 1, err


def test_clip_benchmarks_eval_flags_are_aliases_or_name_compclips_flag(tmp_path, capsys):
    """CLIP_benchmark's `eval --dataset sugarcrepe --output X --dataset_root R`: --output (a JSON file there) answered in one
    line naming compclip's --out (click said "No such option: --dataset (Possible options: --data-root)"); with --out
    the same words score sugarcrepe as compclip's own flags do."""
    from compclip.models import load_model, save_checkpoint

    root = sugarcrepe_root(tmp_path, 12)
    save_checkpoint(load_model("compclip-tiny-clip")[0], tmp_path / "ckpt")
    capsys.readouterr()  # (what it logged, through the handler an earlier test's command set up)
    theirs = ["--model", tmp_path / "ckpt", "--dataset", "sugarcrepe/swap_att", "--dataset_root", root, "--batch_size", "4",
              "--num_workers", "0", "--device", "cpu"]
    code, _, err = run_main(capsys, "eval", *theirs, "--output", tmp_path / "result.json")
    assert code == 2 and err.startswith("error: --output is CLIP_benchmark's flag: ") and "compclip's --out is a folder" in err, err
    assert err.count("\n") == 1
    for flag, compclips in (("--task", "--benchmark zeroshot"), ("--split", "--benchmark NAME/SPLIT"), ("--no_amp", "--precision fp32")):
        code, _, err = run_main(capsys, "eval", flag, "x")
        assert code == 2 and err.startswith(f"error: {flag} is CLIP_benchmark's flag: ") and compclips in err, err
    code, _, err = run_main(capsys, "eval", *theirs, "--out", tmp_path / "theirs")
    assert code == 0, err
    code, _, err = run_main(capsys, "eval", "--model", tmp_path / "ckpt", "--benchmark", "sugarcrepe/swap_att", "--data-root", root,
                            "--batch-size", "4", "--workers", "0", "--device", "cpu", "--out", tmp_path / "ours")
    assert code == 0, err
    assert (json.loads((tmp_path / "theirs" / "sugarcrepe-swap_att.json").read_text())["metrics"]
            == json.loads((tmp_path / "ours" / "sugarcrepe-swap_att.json").read_text())["metrics"])


def test_resume_from_a_path_or_latest(tmp_path):
    from compclip.errors import MissingFileError, UsageError
    from compclip.train import train

    train(settings_config(tmp_path, "a", steps=4, save_every=2, keep=3))
    with pytest.raises(MissingFileError, match="holds no checkpoint"):
        train(settings_config(tmp_path, "b", resume="latest"))
    with pytest.raises(MissingFileError, match="not a checkpoint folder"):
        settings_config(tmp_path, "b", resume=str(tmp_path / "a")).validate()
    # from step 2 of run a into a new folder: steps 3 and 4 as run a took them
    train(settings_config(tmp_path, "b", resume=str(tmp_path / "a" / "checkpoints" / "step_0000002")))
    assert logged(tmp_path, "b", "loss") == {k: v for k, v in logged(tmp_path, "a", "loss").items() if k > 2}
    train(settings_config(tmp_path, "b", resume="latest", steps=4))  # at its end already: nothing to do
    with pytest.raises(UsageError, match="other options"):
        train(settings_config(tmp_path, "c", resume=str(tmp_path / "a" / "checkpoints" / "step_0000002"), lr=0.5))


@pytest.mark.parametrize("precision", ["fp32", "amp"])
def test_grad_clip_norm_bounds_the_update(tmp_path, precision):
    """Plain SGD: one step moves the weights by exactly lr × the clipped norm, when the gradient's norm exceeds it. Under
    amp the norm is clipped after the loss scale (2^16, halved on each overflow, whose step is skipped) is taken off the
    gradients: each finite norm logged is the true one, not 10^4 times it."""
    from compclip.train.trainer import Trainer

    steps = 1 if precision == "fp32" else 8
    trainer = Trainer(settings_config(tmp_path, "a", steps=steps, optimizer="sgd", lr=0.1, schedule="const", grad_clip_norm=0.01,
                                      report_to="none", precision=precision))
    assert trainer.scaler.is_enabled() == (precision == "amp")
    before = [p.detach().clone() for p in trainer._trained()]
    trainer.run()
    moved = math.sqrt(sum(float((p.detach() - b).pow(2).sum()) for p, b in zip(trainer._trained(), before, strict=True)))
    norms = [v for v in logged(tmp_path, "a", "grad_norm").values() if math.isfinite(v)]
    assert norms and all(0.01 < v < 1e3 for v in norms), norms  # fp32's first is 156
    if precision == "fp32":
        assert moved == pytest.approx(0.1 * 0.01, rel=1e-3)
    else:  # each step taken moves by at most lr × the clip norm
        assert 0 < moved <= 0.1 * 0.01 * len(norms) * (1 + 1e-3)
    assert not (tmp_path / "a" / "tensorboard").exists()  # --report-to none: log.jsonl alone


@pytest.mark.parametrize(("precision", "dtype"), [("pure_bf16", torch.bfloat16), ("bf16", torch.bfloat16), ("amp_bfloat16", torch.float32)])
def test_open_clip_precisions_train_and_the_checkpoint_evaluates(tmp_path, precision, dtype):
    from safetensors.torch import load_file

    from compclip.eval.scorer import load_scorer
    from compclip.train import train

    train(settings_config(tmp_path, "a", steps=2, precision=precision, model="compclip-tiny-clip"))
    weights = load_file(tmp_path / "a" / "checkpoints" / "step_0000002" / "model.safetensors")
    assert weights["visual.conv1.weight"].dtype == dtype
    # OpenAI's mixed precision keeps the layer norms in 32 bits; pure casts every weight
    assert weights["ln_final.weight"].dtype == (torch.bfloat16 if precision == "pure_bf16" else torch.float32)
    assert all(math.isfinite(v) for v in logged(tmp_path, "a", "loss").values())
    scorer = load_scorer(str(tmp_path / "a" / "checkpoints" / "step_0000002"), workers=0)
    image = tmp_path / "img" / "0.jpg"
    assert torch.isfinite(scorer.pairs([image], ["a red square"])).all()


def test_force_overrides_build_the_architecture_and_are_recorded(tmp_path):
    import open_clip

    from compclip.errors import UsageError
    from compclip.models import load_model
    from compclip.train import train

    model, _, _ = load_model("compclip-tiny-clip", force_custom_text=True, force_quick_gelu=True, force_context_length=16)
    assert isinstance(model, open_clip.CustomTextCLIP) and model.context_length == 16
    assert isinstance(model.text.transformer.resblocks[0].mlp.gelu, open_clip.transformer.QuickGELU)
    train(settings_config(tmp_path, "a", steps=1, model="compclip-tiny-siglip", force_image_size=32, force_patch_dropout=0.5))
    saved = json.loads((tmp_path / "a" / "checkpoints" / "step_0000001" / "config.json").read_text())["model_cfg"]["vision_cfg"]
    assert (saved["image_size"], saved["patch_dropout"]) == (32, 0.5)
    again, _, _ = load_model(str(tmp_path / "a" / "checkpoints" / "step_0000001"))
    assert again.visual.trunk.patch_embed.img_size == (32, 32)
    with pytest.raises(UsageError, match="its architecture is the one it was trained in"):
        load_model(str(tmp_path / "a" / "checkpoints" / "step_0000001"), force_quick_gelu=True)


def test_torchcompile_compiles_each_block_and_changes_no_output():
    from compclip.models import load_model
    from compclip.train.trainer import compile_blocks

    model, _, _ = load_model("compclip-tiny-clip")
    images, tokens = torch.randn(2, 3, 64, 64), torch.randint(1, 400, (2, 77))
    with torch.no_grad():
        plain = model.encode_image(images), model.encode_text(tokens)
    names = sorted(model.state_dict())
    compile_blocks(model)
    assert sorted(model.state_dict()) == names  # the weights keep their names: checkpoints load anywhere
    assert all(b._compiled_call_impl is not None for b in [*model.visual.transformer.resblocks, *model.transformer.resblocks])
    with torch.no_grad():
        compiled = model.encode_image(images), model.encode_text(tokens)
    for a, b in zip(plain, compiled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_dataset_resampled_draws_shards_with_replacement(tmp_path):
    import webdataset as wds

    from compclip.data import WebDatasetReader
    from compclip.errors import UsageError

    for s in range(4):
        with wds.TarWriter(str(tmp_path / f"shard-{s}.tar")) as sink:
            for i in range(5):
                img = Image.new("RGB", (8, 8), (s * 60, i * 40, 0))
                sink.write({"__key__": f"{s}-{i}", "jpg": img, "txt": f"shard {s} sample {i}"})
    urls = str(tmp_path / "shard-{0..3}.tar")
    settings_config(tmp_path, "a", train_data=urls, dataset_resampled=True).validate()  # the whole run one epoch, without a count
    csv = tmp_path / "pairs.csv"
    csv.write_text("image,caption\n")
    with pytest.raises(UsageError, match=r"--dataset-resampled draws webdataset shards .* is no shards .*--no-dataset-resampled"):
        settings_config(tmp_path, "b", train_data=str(csv), dataset_resampled=True).validate()

    def epoch(seed, number):
        reader = WebDatasetReader(urls)
        reader.resampled, reader.sample_seed, reader.epoch = 12, seed, number
        return [s["caption"] for s in reader]

    first = epoch(0, 0)
    assert len(first) == 12 and first == epoch(0, 0) and first != epoch(0, 1)  # seeded by epoch
    shards = [c.split()[1] for c in first]
    assert len(set(shards[:5])) == len(set(shards[5:10])) == 1  # whole shards, in their order, drawn at random
    drawn = [[c.split()[1] for c in epoch(seed, 0)][::5] for seed in range(10)]
    assert any(len(set(d)) < len(d) for d in drawn)  # with replacement: some epoch draws a shard twice
    # two DataLoader workers: each draws its half of the epoch from its own seeded sequence of shards, the same each run
    reader = WebDatasetReader(urls)
    reader.resampled, reader.sample_seed = 12, 0
    runs = [[s["caption"] for s in torch.utils.data.DataLoader(reader, batch_size=None, num_workers=2)] for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 12
    parts = [[c.split()[1] for c in runs[0][w::2]] for w in (0, 1)]  # the loader takes a sample from each worker in turn
    assert len(parts[0]) == len(parts[1]) == 6 and parts[0] != parts[1]
    # five workers: each one's share of 12 rounded up (open_clip's `math.ceil(num_batches / num_workers)` per worker), so
    # an epoch is never short of its samples: 3 each, 15 in all
    five = [s["caption"] for s in torch.utils.data.DataLoader(reader, batch_size=None, num_workers=5)]
    assert len(five) == 5 * math.ceil(12 / 5) >= 12
    # in batches, as training reads them (a worker's last partial batch dropped): each worker's share is whole batches,
    # open_clip's `with_epoch(ceil(ceil(num_samples / batch) / workers))`, so the epoch holds its 6 batches of 2 and more
    # (2 a worker, 10 in all), where 3 samples a worker made one batch each, 5 in all: an epoch short of its batches
    reader.batch_size = 2
    batches = list(torch.utils.data.DataLoader(reader, batch_size=2, num_workers=5, drop_last=True, collate_fn=list))
    assert len(batches) == 5 * math.ceil(math.ceil(12 / 2) / 5) == 10 >= 12 // 2
    # and in training: the whole run one epoch (no pause for a new one before the end), 3 workers of batches of 4 for 10
    # steps, where 14 samples a worker made 3 batches each and the run's 10th step began epoch 1
    from compclip.train import train

    train(settings_config(tmp_path, "run", train_data=urls, dataset_resampled=True, batch_size=4, steps=10, workers=3))
    assert set(logged(tmp_path, "run", "epoch").values()) == {0}


def half_bad_shards(tmp_path):
    """Two shards of 6 samples, every other one skipped in reading (no caption, or an image that is no image)."""
    import webdataset as wds

    for s in range(2):
        with wds.TarWriter(str(tmp_path / f"half-{s}.tar")) as sink:
            for i in range(6):
                good = Image.new("RGB", (8, 8), (s * 60, i * 40, 0))
                bad = {"txt": f"shard {s} sample {i}", "jpg": b"no image"} if s else {"jpg": good}
                sink.write({"__key__": f"{s}-{i}", **(bad if i % 2 else {"jpg": good, "txt": f"shard {s} sample {i}"})})
    return str(tmp_path / "half-{0..1}.tar")


def test_a_resampled_epoch_counts_the_samples_it_yields_not_those_it_skips(tmp_path, capsys):
    """open_clip's resampled epoch is `with_epoch` batches of the samples a worker yields: on shards where every other
    sample is skipped, --train-num-samples 8 in batches of 4 is two batches an epoch (steps 1-2 epoch 0, step 3 epoch 1),
    where counting the skipped samples too made one of 4 records, 2 samples: no full batch, the run refused. Resumed
    from step 1, the run takes steps 2 and 3 as it did."""
    urls = half_bad_shards(tmp_path)
    run = ("-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", urls, "--dataset-resampled",
           "--train-num-samples", "8", "--batch-size", "4", "--steps", "3", "--workers", "0", "--save-every", "1", "--keep", "3")
    code, _, err = run_main(capsys, *run, "--out", tmp_path / "run")
    assert code == 0, err
    assert logged(tmp_path, "run", "epoch") == {1: 0, 2: 0, 3: 1}
    code, _, err = run_main(capsys, *run, "--out", tmp_path / "resumed", "--resume", tmp_path / "run" / "checkpoints" / "step_0000001")
    assert code == 0, err
    assert logged(tmp_path, "resumed", "loss") == {k: v for k, v in logged(tmp_path, "run", "loss").items() if k > 1}


def test_a_resumed_resampled_epoch_gives_the_batches_the_whole_epoch_would_have(tmp_path):
    """Two workers, batches of 2, a shuffle buffer: after 3 of an epoch's 8 batches, a resume (each part's position, the
    batches given, the worker that gives the next) gives the other 5 as the whole epoch gave them, the records before
    passed over undecoded. Shards whose every sample is skipped end the pass empty instead of being drawn for ever."""
    import webdataset as wds

    from compclip.data import WebDatasetReader

    reader = WebDatasetReader(half_bad_shards(tmp_path), resampled=16, batch_size=2, sample_seed=0, shuffle=4)

    def batches(timeout=0):
        loader = torch.utils.data.DataLoader(reader, batch_size=2, num_workers=2, drop_last=True, collate_fn=list, timeout=timeout)
        return [[(s["key"], s["shard"], s["pos"]) for s in batch] for batch in loader]

    whole = batches()
    assert len(whole) == 8
    positions = {}
    for _, shard, pos in (s for batch in whole[:3] for s in batch):
        positions[shard] = max(positions.get(shard, 0), pos + 1)
    reader.start(0, positions, rotation=3 % 2, batches=3)
    assert batches() == whole[3:]
    with wds.TarWriter(str(tmp_path / "blank.tar")) as sink:
        for i in range(6):
            sink.write({"__key__": str(i), "jpg": Image.new("RGB", (8, 8)), "txt": " "})
    reader = WebDatasetReader(str(tmp_path / "blank.tar"), resampled=16, batch_size=2, shuffle=4)
    assert batches(timeout=60) == [] and reader.stats()["empty_caption"] > 0


def test_val_metrics_against_brute_force():
    from compclip.train.evaluation import clip_metrics

    torch.manual_seed(0)
    logits = torch.randn(9, 9)
    logits[3] = logits[3, 3]  # ties everywhere on row 3: its own pair ranks first, as argsort's order puts it
    metrics = clip_metrics(logits)
    for name, matrix in (("image_to_text", logits), ("text_to_image", logits.T)):
        ranks = []
        for i, row in enumerate(matrix.tolist()):
            order = sorted(range(len(row)), key=lambda j: -row[j])  # stable, as torch's sort on the CPU
            ranks.append(order.index(i))
        assert metrics[f"{name}_mean_rank"] == pytest.approx(sum(ranks) / len(ranks) + 1)
        for k in (1, 5, 10):
            assert metrics[f"{name}_R@{k}"] == pytest.approx(sum(r < k for r in ranks) / len(ranks))
        assert metrics[f"{name}_median_rank"] == sorted(ranks)[(len(ranks) - 1) // 2] + 1


def wandb_records(path):
    """The protobuf `Record`s of W&B's offline run file, read as its format is written (LevelDB's log: 32 KiB blocks of
    records, each a crc32, a length and a kind: whole, first, middle or last piece of one record)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # a block's padding
            pos += left
            continue
        piece, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = piece if kind in (1, 2) else pending + piece
        if kind in (1, 4):
            yield wandb_internal_pb2.Record.FromString(pending)


def wandb_history(path):
    """The history rows of W&B's offline run file."""
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "history":
            yield {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}


def sugarcrepe_root(tmp_path, items: int | None = None):
    """SugarCrepe's swap_att (its first `items` items where given) with stand-in images under their COCO names."""
    root = tmp_path / "bench"
    (root / "coco" / "val2017").mkdir(parents=True)
    records = json.loads((shared_data("sugarcrepe") / "swap_att.json").read_text())
    if items is None:
        (root / "sugarcrepe").symlink_to(shared_data("sugarcrepe"))
    else:
        records = dict(list(records.items())[:items])
        (root / "sugarcrepe").mkdir()
        (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps(records))
    for name in {r["filename"] for r in records.values()}:
        seed = int(name.split(".")[0])
        Image.new("RGB", (32, 24), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(root / "coco" / "val2017" / name)
    return root


def test_two_processes_evaluate_sugarcrepe_log_it_everywhere_and_keep_the_best(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from compclip.train.config import VALIDATION_FIGURES

    data, val = make_dataset(tmp_path, n=32), make_dataset(tmp_path / "val", n=10)
    root, out, key = sugarcrepe_root(tmp_path), tmp_path / "run", "eval/sugarcrepe/swap_att/acc"
    env = {**env_for_children(), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "compclip", "-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
           "--out", str(out), "--steps", "6", "--batch-size", "8", "--lr", "1e-3", "--workers", "0", "--eval-benchmarks",
           "sugarcrepe/swap_att", "--eval-data-root", str(root), "--val-data", str(val), "--eval-every", "2", "--keep-best",
           "sugarcrepe/swap_att", "--report-to", "tensorboard,wandb", "--save-every", "3"]
    result = run_tree(cmd, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = {r["step"]: r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines())}
    evaluated = {step: r[key] for step, r in figures.items() if key in r}
    assert sorted(evaluated) == [2, 4, 6] and all("val/image_to_text_R@1" in figures[s] for s in evaluated)
    assert {k for k in figures[6] if k.startswith("val/")} == {*VALIDATION_FIGURES, "val/num_samples"}  # what --keep-best may name
    tb = EventAccumulator(str(out / "tensorboard")).Reload()
    assert {e.step: pytest.approx(e.value) for e in tb.Scalars(key)} == evaluated
    history = {r["_step"]: r for r in wandb_history(next((out / "wandb").glob("offline-run-*/run-*.wandb")))}
    assert {step: r[key] for step, r in history.items() if key in r} == pytest.approx(evaluated)
    assert history[5]["train/loss"] == pytest.approx(figures[5]["loss"])  # open_clip_train's tags: train/, val/
    assert {e.step: pytest.approx(e.value) for e in tb.Scalars("train/lr")} == {s: r["lr"] for s, r in figures.items()}
    best = json.loads((out / "checkpoints" / "best" / "best.json").read_text())
    assert best["value"] == max(evaluated.values()) and evaluated[best["step"]] == best["value"]
    # the kept weights, evaluated afresh by `compclip eval`, give the figure logged at that step
    code, _, err = run_main(capsys, "-q", "eval", "--model", out / "checkpoints" / "best", "--benchmark", "sugarcrepe/swap_att",
                            "--data-root", root, "--out", tmp_path / "eval", "--workers", "0", "--device", "cpu")
    assert code == 0, err[-2000:]
    record = json.loads((tmp_path / "eval" / "sugarcrepe-swap_att.json").read_text())
    assert record["metrics"]["swap_att"]["acc"] == pytest.approx(best["value"], abs=1e-9)


def open_clip_train_tags() -> set[str]:
    """The TensorBoard tags of open_clip_train's training steps, read from its installed train.py: the keys of its
    `log_data` dict and of `losses` (its total, `losses["loss"]`), each under `train/`."""
    import ast
    import inspect

    from open_clip_train import train

    tree = ast.parse(inspect.getsource(train))
    keys = {k.value for node in ast.walk(tree) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
            and any(getattr(t, "id", None) == "log_data" for t in node.targets) for k in node.value.keys}
    keys |= {node.slice.value for node in ast.walk(tree) if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "losses"
             and isinstance(node.slice, ast.Constant)}
    return {f"train/{k}" for k in keys}


def test_tensorboard_tags_are_open_clip_trains_and_an_evaluations_is_the_name_keep_best_takes(tmp_path, capsys):
    """A run's TensorBoard tags read back from its event file: open_clip_train's `train/` names (docs/guide.md says why
    compclip adds `train/epoch` and names each loss term by its method), `val/` for --val-data, and each benchmark figure
    as `eval/` + the name --keep-best takes, the kept figure's value that tag's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from compclip.train.config import VALIDATION_FIGURES

    data = make_dataset(tmp_path, n=16)
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--out", tmp_path / "run", "--steps", "2", "--batch-size", "8", "--workers", "0", "--val-data", data,
                            "--eval-benchmarks", "sugarcrepe/swap_att", "--eval-data-root", sugarcrepe_root(tmp_path, 24),
                            "--keep-best", "sugarcrepe/swap_att/acc")
    assert code == 0, err
    tags = set(EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload().Tags()["scalars"])
    expected = open_clip_train_tags()
    assert {"train/scale", "train/samples_per_second", "train/samples_per_second_per_gpu", "train/batch_time"} <= expected
    assert {t for t in tags if t.startswith("train/")} == expected | {"train/epoch", "train/siglip"}
    assert {t for t in tags if t.startswith("val/")} == {*VALIDATION_FIGURES, "val/num_samples"}
    best = json.loads((tmp_path / "run" / "checkpoints" / "best" / "best.json").read_text())
    assert best["metric"] == "eval/sugarcrepe/swap_att/acc" and best["metric"] in tags
    assert not [t for t in tags if "swap_att/swap_att" in t]  # the split named once
    scores = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload().Scalars(best["metric"])
    assert scores[-1].value == pytest.approx(best["value"])


def test_evaluating_inside_a_training_loop_leaves_each_module_in_the_mode_it_had(tmp_path):
    """`compclip.evaluate` in a user's loop, every N steps as open_clip_train evaluates: scored in eval mode, then each
    submodule back in its own mode (the model training, the tower its trainer locked still in eval), not all in eval."""
    import compclip
    from compclip.models import load_model

    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    model.train()
    model.visual.eval()  # as open_clip's lock_image_tower(freeze_bn_stats=True) leaves it
    before = {name: m.training for name, m in model.named_modules()}
    seen = []
    text = getattr(model, "text", None) or model.transformer  # the text tower, training
    text.register_forward_pre_hook(lambda module, _: seen.append(module.training))
    compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att", data_root=sugarcrepe_root(tmp_path, 6), workers=0)
    assert seen and not any(seen)  # scored in eval mode
    assert {name: m.training for name, m in model.named_modules()} == before


def test_keep_best_keeps_the_lowest_loss_or_rank_and_the_highest_score(tmp_path):
    """A loss or a rank is best lowest: `--keep-best val/clip_val_loss` kept the worst step while every figure was ranked
    highest first. The kept step is each series' argmin or argmax; a NaN never replaces it."""
    from compclip.train.evaluation import keep_if_best

    series = [0.7, 0.4, float("nan"), 0.9, 0.4, 0.2, 0.5]
    for figure, pick in (("val/clip_val_loss", min), ("val/image_to_text_mean_rank", min), ("val/text_to_image_R@1", max),
                         ("eval/sugarcrepe/swap_att/swap_att/acc", max)):
        folder, saved = tmp_path / figure.replace("/", "_"), []
        for step, value in enumerate(series, 1):
            keep_if_best(folder, figure, value, step, save=lambda f, step=step, saved=saved: (f.mkdir(exist_ok=True), saved.append(step)))
        finite = [v for v in series if not math.isnan(v)]
        best = json.loads((folder / "best.json").read_text())
        assert best == {"metric": figure, "value": pick(finite), "step": series.index(pick(finite)) + 1,
                        "higher_is_better": pick is max}
        improved, so_far = [], None
        for step, value in enumerate(series, 1):  # the steps that strictly beat every earlier one
            if not math.isnan(value) and (so_far is None or (value < so_far if pick is min else value > so_far)):
                improved, so_far = [*improved, step], value
        assert saved == improved, figure


@pytest.mark.parametrize("figure", ["val/num_samples", "val/image_to_text_R@2", "val/i2t_R@1"])
def test_keep_best_names_a_validation_figure_or_is_refused_before_training(tmp_path, capsys, figure):
    data = make_dataset(tmp_path, n=8)
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data,
                            "--val-data", data, "--keep-best", figure, "--out", tmp_path / "run", "--steps", "2",
                            "--batch-size", "4", "--workers", "0")
    assert code == 2 and err.startswith(f"error: --keep-best {figure}: not a figure of --val-data; they are "
                                        "val/image_to_text_mean_rank, "), err
    assert err.count("\n") == 1 and "val/clip_val_loss" in err and "num_samples" not in err.split(":", 2)[2]
    assert not (tmp_path / "run").exists()


def test_wandb_writes_under_wandb_dir_when_it_is_set(tmp_path):
    """W&B's own WANDB_DIR places its files, as it does under open_clip_train; without it they go under --out. (A process
    of its own: W&B keeps its settings for the rest of a process.)"""
    data = make_dataset(tmp_path, n=8)
    env = {**env_for_children(), "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path / "elsewhere")}
    done = subprocess.run(compclip("train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", str(data),
                                   "--out", str(tmp_path / "run"), "--steps", "1", "--batch-size", "4", "--workers", "0",
                                   "--report-to", "wandb"), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((tmp_path / "elsewhere" / "wandb").glob("offline-run-*/run-*.wandb")) and not (tmp_path / "run" / "wandb").exists()


def test_wandb_without_a_login_is_one_line_saying_what_to_do(tmp_path, capsys, monkeypatch):
    """`--report-to wandb` where no API key is set (a fresh account on a cluster): W&B's UsageError was a traceback. Now one
    line with W&B's reason and the two ways on, exit 2, before any step; no checkpoint is written."""
    import os

    data = make_dataset(tmp_path, n=8)
    for name in [k for k in os.environ if k.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no W&B settings
    out = tmp_path / "run"
    code, _, err = run_main(capsys, "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--train-data", data, "--out",
                            out, "--steps", "2", "--batch-size", "4", "--workers", "0", "--report-to", "wandb")
    assert code == 2 and err.splitlines()[-1] == ("error: --report-to wandb: W&B did not start (No API key configured. Use `wandb "
                                                  f"login` to log in.); run `wandb login`, or set WANDB_MODE=offline to log into "
                                                  f"{out / 'wandb'} and `wandb sync` it later"), err
    assert not (out / "checkpoints").exists() and not (out / "log.jsonl").exists()


def test_validation_figures_are_open_clip_trains_evaluate_on_the_same_batches(tmp_path):
    """--val-data's figures against open_clip_train's own `evaluate` over the same images, captions and batches of 4 (the
    last one of 2): `clip_val_loss` is the batch losses weighted by size, the ranks are over the whole set."""
    from types import SimpleNamespace

    from open_clip_train.train import evaluate as open_clip_evaluate

    from compclip.models import load_model
    from compclip.train.evaluation import validation_metrics

    data = make_dataset(tmp_path, n=10)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    model.eval()
    cfg = settings_config(tmp_path, "run", val_data=str(data), batch_size=4)
    ours = validation_metrics(model, preprocess, tokenizer, cfg, torch.device("cpu"))
    rows = [line.split(",", 1) for line in data.read_text().splitlines()[1:]]
    pairs = [(preprocess(Image.open(tmp_path / image).convert("RGB")), tokenizer([caption])[0]) for image, caption in rows]
    loader = torch.utils.data.DataLoader(pairs, batch_size=4)
    loader.num_samples = len(pairs)
    args = SimpleNamespace(rank=0, local_rank=0, device="cpu", precision="fp32", distributed=False, horovod=False, val_frequency=1,
                           epochs=1, zeroshot_frequency=0, save_logs=False, wandb=False)
    model.output_dict = True  # open_clip_train reads the model's outputs by name
    theirs = open_clip_evaluate(model, {"val": SimpleNamespace(dataloader=loader)}, 1, args, tokenizer=tokenizer)
    assert ours["val/clip_val_loss"] == pytest.approx(theirs["clip_val_loss"], rel=1e-5)
    for key in ("image_to_text_mean_rank", "text_to_image_median_rank", "image_to_text_R@1", "text_to_image_R@5"):
        assert ours[f"val/{key}"] == pytest.approx(theirs[key]), key
    assert ours["val/num_samples"] == theirs["num_samples"] == 10


def test_each_precision_casts_inputs_and_autocasts_as_open_clip_does():
    """Every --precision against open_clip's `get_input_dtype` and open_clip_train's `get_autocast`: fp16's and pure_fp16's
    images go in as float16, bf16's as bfloat16, the amp forms in float32 under autocast of their dtype."""
    import contextlib

    import open_clip
    from open_clip_train.precision import get_autocast

    from compclip.names import TRAIN_PRECISIONS
    from compclip.precision import autocast, input_dtype

    cpu = torch.device("cpu")
    for precision in TRAIN_PRECISIONS:
        assert input_dtype(precision) == open_clip.get_input_dtype(precision), precision
        ours, theirs = autocast(cpu, precision), get_autocast(precision, device_type="cpu")
        if theirs is contextlib.suppress:
            assert not isinstance(ours, torch.autocast), precision
        else:
            assert isinstance(ours, torch.autocast) and ours.fast_dtype == theirs().fast_dtype, precision


@pytest.mark.parametrize(("precision", "dtype"), [("fp16", torch.float16), ("amp", torch.float32), ("bf16", torch.bfloat16)])
def test_the_trainer_feeds_images_in_the_precisions_input_dtype(tmp_path, precision, dtype):
    """What reaches the image tower in a real step: 16-bit weights take 16-bit images, autocast takes float32."""
    from compclip.train.trainer import Trainer

    trainer = Trainer(settings_config(tmp_path, "a", steps=1, precision=precision, model="compclip-tiny-clip", report_to="none",
                                      skip_nonfinite=1))
    seen = []
    trainer.model.visual.register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    trainer.run()
    assert seen and set(seen) == {dtype}
