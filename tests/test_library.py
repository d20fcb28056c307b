"""compclip inside the user's own code: the harness on a model in memory, results as a DataFrame, full registries."""
import json
import os
import subprocess
import sys

import pytest
import torch
from PIL import Image

from conftest import run_main, shared_data


@pytest.fixture(scope="module")
def swap_root(tmp_path_factory):
    """SugarCrepe's and SugarCrepe++'s published swap_att files, with stand-in images under their real COCO names."""
    root = tmp_path_factory.mktemp("data")
    names = set()
    for bench in ("sugarcrepe", "sugarcrepe_pp"):
        (root / bench).mkdir()
        (root / bench / "swap_att.json").symlink_to(shared_data(bench, "swap_att.json"))
        records = json.loads(shared_data(bench, "swap_att.json").read_text())
        names |= {r["filename"] for r in (records.values() if isinstance(records, dict) else records)}
    (root / "coco" / "val2017").mkdir(parents=True)
    for name in sorted(names):
        seed = int(name.split(".")[0])
        Image.new("RGB", (32, 24), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256)).save(root / "coco" / "val2017" / name)
    return root


BENCHMARKS = "sugarcrepe/swap_att,sugarcrepe_pp/swap_att,winoground"


def test_evaluate_in_memory_writes_what_compclip_eval_writes_for_its_checkpoint(swap_root, tmp_path, capsys):
    import compclip
    from compclip.models import load_model, save_checkpoint

    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    save_checkpoint(model, tmp_path / "ckpt")
    records = compclip.evaluate(model, preprocess, tokenizer, BENCHMARKS, data_root=swap_root, out=tmp_path / "memory", workers=0)
    code, _, _ = run_main(capsys, "eval", "--model", tmp_path / "ckpt", "--benchmark", BENCHMARKS, "--out", tmp_path / "cli",
                          "--data-root", swap_root, "--workers", 0, "--device", "cpu")
    assert code == 1  # winoground's files are absent: written incomplete, as the command line says
    files = sorted(p.name for p in (tmp_path / "cli").glob("*.json"))
    assert files == sorted(p.name for p in (tmp_path / "memory").glob("*.json")) and len(files) == 3
    for file in files:
        cli, memory = (json.loads((tmp_path / side / file).read_text()) for side in ("cli", "memory"))
        assert json.dumps(memory["metrics"]) == json.dumps(cli["metrics"]) and memory == records[memory["dataset"]]
        differ = {k for k in cli if cli[k] != memory.get(k)}
        assert differ <= {"model", "weights_sha256", "seconds", "lacks"}, differ  # the name and file, and how long it took
        assert memory["model"] == "CLIP" and memory["weights_sha256"] is None  # in memory: named by its class, no file
    assert records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["n"] == 666

    table = compclip.load_results([tmp_path / "cli", tmp_path / "memory"])
    assert list(table.columns) == ["model", "benchmark", "split", "metric", "value", "n"]
    swap = table[(table.benchmark == "sugarcrepe-swap_att") & (table.split == "swap_att") & (table.metric == "acc")]
    acc = records["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"]
    assert swap.set_index("model")["value"].to_dict() == {"cli": acc, "memory": acc}
    assert swap["n"].tolist() == [666, 666]
    totals = table[(table.benchmark == "sugarcrepe_pp-swap_att") & (table.split == "")]
    assert set(totals.metric) >= {"swap_itt", "overall_itt"} and totals["n"].isna().all()
    assert set(table[table.benchmark == "winoground"].metric) == set()  # a benchmark that did not run gives no score
    assert len(table) == len(table.drop_duplicates(["model", "benchmark", "split", "metric"]))


def test_evaluate_takes_a_transformers_model_as_the_user_holds_it(swap_root, tmp_path):
    """A transformers CLIP model (compclip's own export of the tiny model, in memory) through `get_*_features`: the same
    choices as the open_clip model it was converted from, up to float rounding."""
    import compclip
    from compclip.export.hf import convert
    from compclip.models import load_model

    torch.manual_seed(0)
    model, preprocess, tokenizer = load_model("compclip-tiny-clip")
    hf, _ = convert(model)
    ours = compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)
    theirs = compclip.evaluate(hf.eval(), preprocess, tokenizer, "sugarcrepe/swap_att", data_root=swap_root, workers=0)
    assert theirs["sugarcrepe/swap_att"]["model"] == "CLIPModel"
    assert theirs["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"] == pytest.approx(
        ours["sugarcrepe/swap_att"]["metrics"]["swap_att"]["acc"], abs=2 / 666)
    with pytest.raises(ValueError, match="is not a two-tower model"):
        compclip.evaluate(torch.nn.Linear(2, 2), preprocess, tokenizer, "sugarcrepe", data_root=swap_root)


def test_the_benchmark_registry_is_full_wherever_it_is_imported_from():
    code = "from compclip.eval.base import REGISTRY; print(len(REGISTRY), 'sugarcrepe' in REGISTRY, sorted(REGISTRY)[0])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.stdout.split() == ["12", "True", "aro_order"], out.stderr[-2000:]
