"""Files someone else made, handed to compclip as a user is handed them: none of them runs code, writes through a link
or deletes what compclip did not make, and none loses or mislabels results without a word. Each case builds the real
thing (a TorchScript archive with a scripted `__setstate__`, a tokenizer folder that asks for its own code, a planted
symbolic link, a second process holding a store) and checks what is on disk afterwards."""
import json
import os
import re
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
import yaml

from compclip.errors import DataError, UsageError
from compclip.models import load_model, save_checkpoint
from compclip.models.checkpoint import read_torchscript, sha256_of, weights_sha256
from conftest import run_main, run_tree
from test_train import env_for_children, make_dataset

TRAIN = ("-q", "train", "--method", "siglip", "--model", "compclip-tiny-siglip", "--batch-size", "8", "--workers", "0",
         "--steps", "1")


def one_error_line(code, err, *fragments):
    assert code == 2 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, err[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ---- a TorchScript archive ---------------------------------------------------------------------------------------------


SCRIPT = '''
import torch
from typing import Tuple


class Payload(torch.nn.Module):
    """Its __setstate__ maps VICTIM and writes 7.0 over it: what torch.jit.load runs while it loads the archive."""

    def __init__(self, victim: str):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2))
        self.victim = victim

    def forward(self, x):
        return x * self.weight

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, str, bool]:
        return (self.weight, self.victim, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, str, bool]) -> None:
        mapped = torch.from_file(state[1], shared=True, size=16)
        mapped.fill_(7.0)
        self.weight = state[0] + mapped[:2] * 0  # used, so the compiler keeps the write
        self.victim = state[1]
        self.training = state[2]


class Model(torch.nn.Module):
    def __init__(self, victim: str):
        super().__init__()
        self.payload = Payload(victim)
        self.proj = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.proj(self.payload(x))
'''


@pytest.fixture
def armed(tmp_path):
    """A TorchScript archive whose scripted `__setstate__` overwrites `victim`, shown to do so under `torch.jit.load`."""
    victim = tmp_path / "victim.bin"
    victim.write_bytes(bytes(64))
    module = tmp_path / "payload_model.py"
    module.write_text(SCRIPT)
    sys.path.insert(0, str(tmp_path))
    try:
        import payload_model
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("payload_model", None)
    archive = tmp_path / "weights.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(payload_model.Model(str(victim))).save(str(archive))
        assert victim.read_bytes() == bytes(64)
        torch.jit.load(str(archive))  # the reference: loading it the way compclip used to runs the payload
    assert victim.read_bytes() != bytes(64)
    victim.write_bytes(bytes(64))
    return archive, victim


def test_a_torchscript_archive_given_as_pretrained_runs_nothing(armed, capsys):
    archive, victim = armed
    with pytest.raises(DataError, match=r"weights.pt: refused: .*Payload at payload is stored by its own __getstate__"):
        load_model("compclip-tiny-clip", pretrained=str(archive))
    from PIL import Image

    Image.new("RGB", (40, 32), (200, 30, 30)).save(archive.parent / "photo.jpg")
    code, _, err = run_main(capsys, "-q", "attention", "--model", "compclip-tiny-clip", "--pretrained", str(archive),
                            "--image", str(archive.parent / "photo.jpg"), "--concept", "a red car", "--out",
                            str(archive.parent / "map.png"))
    one_error_line(code, err, "weights.pt: refused", "__setstate__")
    assert victim.read_bytes() == bytes(64) and not (archive.parent / "map.png").exists()


def test_a_torchscript_archive_saved_as_a_checkpoints_safetensors_is_refused_unrun(armed, tmp_path):
    archive, victim = armed
    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    (folder / "model.safetensors").write_bytes(archive.read_bytes())
    with pytest.raises(DataError, match=r"model.safetensors: not a readable weights file \(SafetensorError"):
        load_model(str(folder))
    assert victim.read_bytes() == bytes(64)


def test_a_plain_torchscript_archive_reads_as_torch_jit_reads_it(tmp_path):
    """The tensors read without running the archive are the ones `torch.jit.load(...).state_dict()` gives, names and
    values (buffers included), for a scripted open_clip model."""
    import open_clip

    model = open_clip.create_model("compclip-tiny-clip", force_quick_gelu=True).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.script(model).save(str(tmp_path / "clip.pt"))
        reference = torch.jit.load(str(tmp_path / "clip.pt")).state_dict()
    read = read_torchscript(tmp_path / "clip.pt")
    assert read.keys() == reference.keys()
    for name, tensor in reference.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor), name


# ---- a tokenizer that asks for its own code ----------------------------------------------------------------------------


def test_a_checkpoints_tokenizer_cannot_ask_to_run_its_own_code(tmp_path):
    marker = tmp_path / "ran"
    rogue = tmp_path / "rogue-tokenizer"
    rogue.mkdir()
    (rogue / "open_clip_config.json").write_text(json.dumps({"model_cfg": {"text_cfg": {
        "hf_tokenizer_name": "rogue", "context_length": 16, "tokenizer_kwargs": {"trust_remote_code": True}}}}))
    (rogue / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["tokenization_rogue.RogueTokenizer",
                                                                                           None]}}))
    (rogue / "tokenization_rogue.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n"
                                                 "from transformers import PreTrainedTokenizer\n\n\n"
                                                 "class RogueTokenizer(PreTrainedTokenizer):\n    pass\n")
    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["tokenizer"]["source"] = f"local-dir:{rogue}"
    (folder / "config.json").write_text(json.dumps(config))
    _, _, tokenizer = load_model(str(folder))
    with pytest.raises(DataError, match=r"rogue-tokenizer: its open_clip_config.json asks to run the tokenizer's own Python"):
        tokenizer(["a red car"])
    assert not marker.exists()


# ---- a checkpoint whose config.json says what its weights do not --------------------------------------------------------


def eval_args(folder, data_root, out):
    return ("eval", "--model", folder, "--benchmark", "sugarcrepe/swap_att", "--data-root", data_root, "--out", out, "--workers", "0",
            "--device", "cpu")


def test_a_checkpoint_whose_tokenizer_says_another_context_length_than_its_weights_is_refused(tmp_path, capsys, swap_root):
    """It evaluated, exit 0, every number changed (a mean R@1 of 0.100 became 0.0375): the text tower slices its positional
    embedding to the tokenizer's rows. Refused by `compclip eval` and `compclip.load_model`, the weights' length named."""
    import compclip

    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    config["tokenizer"]["context_length"] = 16
    (folder / "config.json").write_text(json.dumps(config))
    positions = model.positional_embedding.shape[0]
    said = (f"{folder / 'config.json'}: tokenizer.context_length is 16, but the weights' positional_embedding holds {positions} "
            f"positions and open_clip_config.json has text_cfg.context_length {positions}")
    one_error_line(*run_main(capsys, *eval_args(folder, swap_root, tmp_path / "out"))[::2], said)
    assert not list((tmp_path / "out").glob("*.json"))
    with pytest.raises(DataError, match=re.escape(said)):
        compclip.load_model(str(folder))


@pytest.mark.parametrize("source", ["local-dir", "hf-hub", "name"])
def test_a_checkpoints_tokenizer_that_is_not_there_is_refused_not_replaced_by_clips(tmp_path, capsys, swap_root, hub_cache, source):
    """open_clip tokenizes a name it does not know with its default CLIP BPE after a generic warning, and a missing folder
    or hub repository surfaced at the first caption as a download to retry. Refused when the checkpoint loads, naming its
    config.json, the source and where it was looked for; a hub repository in the cache still loads offline."""
    import open_clip

    from conftest import plant_hub_repo

    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text())
    named, where = {"local-dir": (f"local-dir:{tmp_path / 'gone'}", f"no {tmp_path / 'gone' / 'open_clip_config.json'}"),
                    "hf-hub": ("hf-hub:someone/tokenizer", f"offline, and the Hugging Face cache {hub_cache} holds none"),
                    "name": ("ViT-Q-99", "open_clip knows no model of that name")}[source]
    config["tokenizer"]["source"] = named
    (folder / "config.json").write_text(json.dumps(config))
    said = f"{folder / 'config.json'}: its tokenizer {named} is not there ({where}"
    one_error_line(*run_main(capsys, *eval_args(folder, swap_root, tmp_path / "out"))[::2], said)
    with pytest.raises(DataError, match=re.escape(said)):
        load_model(str(folder))
    if source == "hf-hub":
        plant_hub_repo(hub_cache, "someone/tokenizer", {"open_clip_config.json": json.dumps({"model_cfg": config["model_cfg"]}).encode()})
        tokens = load_model(str(folder))[2](["a red car"])
        assert torch.equal(tokens, open_clip.SimpleTokenizer(context_length=config["tokenizer"]["context_length"])(["a red car"]))


# ---- links planted in a run folder or a store --------------------------------------------------------------------------


@pytest.mark.parametrize("name", [".lock", "log.jsonl", "train.log", "checkpoints"])
def test_a_link_planted_in_a_run_folder_is_refused_and_its_target_untouched(tmp_path, capsys, name):
    data = make_dataset(tmp_path, n=8)
    out = tmp_path / "run"
    out.mkdir()
    target = tmp_path / "someone-elses"
    if name == "checkpoints":
        (target / "step_0000001").mkdir(parents=True)
        (target / "step_0000001" / "model.safetensors").write_bytes(b"theirs")
    else:
        target.write_text("their file\n")
    (out / name).symlink_to(target)
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(out))
    one_error_line(code, err, f"{out / name}: a symbolic link (to {target})", "remove it")
    if name == "checkpoints":
        assert [p.name for p in target.iterdir()] == ["step_0000001"]
        assert (target / "step_0000001" / "model.safetensors").read_bytes() == b"theirs"
    else:
        assert target.read_text() == "their file\n"


def test_a_link_planted_after_the_check_is_still_not_written_through(tmp_path):
    """The log is opened with O_NOFOLLOW, so a link that appears between the run's check and a write is refused too."""
    from compclip.io import append_line

    target = tmp_path / "theirs"
    target.write_text("kept\n")
    (tmp_path / "log.jsonl").symlink_to(target)
    with pytest.raises(DataError, match="a symbolic link"):
        append_line(tmp_path / "log.jsonl", "{}")
    assert target.read_text() == "kept\n"


def test_a_store_whose_index_is_a_link_is_refused_and_only_compclips_index_files_are_removed(tmp_path):
    from compclip.concepts import build_store

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("data.npy", "hi-0123456789ab.npy"):
        np.save(elsewhere / name, np.arange(3))
    store = tmp_path / "store"
    captions = ["a red car", "a blue bus", "a dog on a mat"]
    build_store(captions, store, what="keywords")
    mine = store / "index" / "notes.npy"
    np.save(mine, np.arange(2))
    build_store([*captions, "a cat"], store, what="keywords")  # a new caption: the index is written again
    assert mine.is_file()  # a file compclip did not make stays
    import shutil

    shutil.rmtree(store / "index")
    (store / "index").symlink_to(elsewhere)
    with pytest.raises(DataError, match=r"store/index: a symbolic link"):
        build_store([*captions, "a cow"], store, what="keywords")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["data.npy", "hi-0123456789ab.npy"]


def test_a_second_concepts_run_into_a_store_part_is_refused_while_the_first_holds_it(tmp_path, capsys):
    captions = tmp_path / "captions.csv"
    captions.write_text("caption\n" + "".join(f"a red car number {i}\n" for i in range(20)))
    store = tmp_path / "store"
    assert run_main(capsys, "-q", "concepts", str(captions), "--out", str(store), "--what", "keywords")[0] == 0
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from compclip.io import FolderLock\n"
        f"FolderLock(Path({str(store / 'parts' / '0-of-1' / '.lock')!r}), 'x').acquire(); print('held', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        more = tmp_path / "more.csv"
        more.write_text("caption\n" + "".join(f"a blue bus number {i}\n" for i in range(20)))
        code, _, err = run_main(capsys, "-q", "concepts", str(more), "--out", str(store), "--what", "keywords")
        one_error_line(code, err, "0-of-1 is in use by another compclip concepts run of part 0/1", f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    from compclip.concepts import ConceptStore

    assert len(ConceptStore(store)) == 20  # the first run's records, nothing half-written by the second
    assert run_main(capsys, "-q", "concepts", str(more), "--out", str(store), "--what", "keywords")[0] == 0
    assert len(ConceptStore(store)) == 40  # once the holder is gone (killed: the kernel drops its lock), the run goes on


# ---- results that were lost or mislabelled -----------------------------------------------------------------------------


def test_a_caption_that_opens_a_quote_and_never_closes_it_is_named_not_swallowed(tmp_path):
    from compclip.concepts.inputs import iter_captions
    from compclip.data import CsvReader

    rows = [f"img/{i}.jpg\ta photo number {i}" for i in range(40)]
    rows[10] = 'img/10.jpg\t"a photo that opens a quote'
    tsv = tmp_path / "captions.tsv"
    tsv.write_text("image\tcaption\n" + "\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"captions.tsv:12: a field opens a quote"):
        list(CsvReader(tsv).records())
    with pytest.raises(DataError, match=r"captions.tsv:12: a field opens a quote"):
        list(iter_captions(tsv))
    # quoting as pandas writes it still reads: a doubled quote inside a quoted field, a caption over two lines
    tsv.write_text('image\tcaption\nimg/0.jpg\t"a ""red"" car"\nimg/1.jpg\t"two\nlines"\nimg/2.jpg\tplain\n')
    assert [c for _, _, c, _ in CsvReader(tsv).records()] == ['a "red" car', "two\nlines", "plain"]


def test_the_recorded_weights_are_the_weights_loaded_while_the_checkpoint_is_replaced(tmp_path):
    """`checkpoints/best` rewritten by a run while it is evaluated: each load's SHA-256 names the weights it loaded."""
    first, _, _ = load_model("compclip-tiny-clip", init_seed=1)
    second, _, _ = load_model("compclip-tiny-clip", init_seed=2)
    sources = {}
    for model, name in ((first, "a"), (second, "b")):
        folder = save_checkpoint(model, tmp_path / name)
        sources[sha256_of(folder / "model.safetensors")] = model.state_dict()
    best = tmp_path / "best"
    save_checkpoint(first, best)
    stop = threading.Event()

    def rewrite():  # as a run keeping its best, often: a new folder every tenth of a second
        while not stop.wait(0.1):
            for model in (second, first):
                save_checkpoint(model, best)

    writer = threading.Thread(target=rewrite)
    writer.start()
    loaded = 0
    try:
        for _ in range(200):
            if loaded == 10:
                break
            try:
                model, _, _ = load_model(str(best))
            except (FileNotFoundError, DataError):  # the instant between the two renames: no folder there
                continue
            digest = weights_sha256(model)
            assert digest in sources
            assert all(torch.equal(v, sources[digest][k]) for k, v in model.state_dict().items())
            loaded += 1
    finally:
        stop.set()
        writer.join()
    assert loaded >= 10


def test_a_world_drawn_again_with_another_seed_keeps_none_of_the_first(tmp_path):
    from compclip.world import WorldConfig, generate

    settings = {"n_train": 8, "n_val": 2, "n_test": 6, "size": 32}
    generate(tmp_path / "fresh", WorldConfig(seed=1, **settings), workers=1)
    generate(tmp_path / "world", WorldConfig(seed=0, **settings), workers=1)
    generate(tmp_path / "world", WorldConfig(seed=1, **settings), workers=1)

    def listing(root):
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())

    assert listing(tmp_path / "world") == listing(tmp_path / "fresh")
    for task in ("shape", "color"):
        zeroshot = tmp_path / "world" / "test_seen" / "zeroshot" / task
        names = [p.name for p in zeroshot.glob("*/*.png")]
        assert len(names) == len(set(names)) == settings["n_test"]  # each image in one class


def test_markup_in_folder_names_and_result_fields_stays_text_in_the_report_and_the_card(tmp_path):
    from compclip.eval.report import build_report
    from compclip.export.card import model_card

    hostile = "x|y<img src=x onerror=alert(1)>"
    folder = tmp_path / hostile
    folder.mkdir()
    (folder / "sugarcrepe.json").write_text(json.dumps({
        "dataset": "sugarcrepe", "ties": "<script>alert(2)</script>\n| forged | row |",
        "metrics": {"add": {"acc": 0.5, "n": 2}, "swap_att": 0.5}}))
    report = build_report([folder], tmp_path / "report").read_text()
    assert "<img" not in report and "<script" not in report and "| forged |" not in report
    summary = next(line for line in report.splitlines() if "onerror" in line)
    header = report.splitlines()[report.splitlines().index(summary) - 2]
    unescaped = lambda line: len(line.replace("\\|", "")) - len(line.replace("\\|", "").replace("|", ""))  # noqa: E731
    assert unescaped(summary) == unescaped(header)  # the folder's | does not add a cell

    config = {"model_name": "hf-hub:someone/m```\n<script>alert(3)</script>", "pretrained": None, "model_cfg": {},
              "method": None}
    results = [{"dataset": "a|b<b>bold</b>", "metrics": {"acc\n| forged |": 0.5}, "ties": "strict", "precision": "fp32",
                "compclip_version": "0"},
               {"dataset": "sugarcrepe/swap_att", "metrics": {"acc": 0.25}, "ties": "strict", "precision": "fp32",
                "compclip_version": "0"}]
    card = model_card(config, library="open_clip", kind="clip", license="mit", usage=f"load({config['model_name']!r})",
                      notes=["<iframe src=x>"], results=results)
    from huggingface_hub import ModelCardData

    front = yaml.safe_load(card.split("---\n")[1])
    evals = ModelCardData(**front).eval_results  # as the Hub reads the front matter
    named = {(e.dataset_type, e.dataset_config, e.dataset_split, e.metric_type): e.metric_value for e in evals}
    # a label's `/` names the benchmark's part (the Hub's config), not a train/test split; another program's markup is
    # not carried into fields the Hub shows as they are
    assert named == {("a-b-b-bold", "b", None, "acc-forged"): 0.5, ("sugarcrepe", "swap_att", None, "acc"): 0.25}
    assert all(not set("<>|\n") & set(str(v)) for e in evals for v in vars(e).values())
    body = card.split("\n---\n", 1)[1]
    fence = next(line for line in body.splitlines() if line.endswith("python")).removesuffix("python")
    code_start = body.index(fence + "python")
    code_end = body.index("\n" + fence + "\n", code_start)
    outside = body[:code_start] + body[code_end:]
    assert "<script" not in outside and "<b>" not in outside and "<iframe" not in outside and "| forged |" not in outside
    assert "```" in body[code_start + len(fence):code_end] and len(fence) > 3  # the name's own fence cannot close the block


def test_a_training_file_named_with_markup_and_a_result_holding_it_stay_text_in_the_exported_card(tmp_path, capsys):
    """The card names the training data by its file's name and lists the results found for the weights: a CSV named
    `<img ... onerror=...>.csv` and a result whose task is a `<script>` are text there, in the body and the front matter."""
    data = make_dataset(tmp_path, n=8)
    hostile = data.rename(data.with_name("<img src=x onerror=alert(1)>.csv"))
    code, _, err = run_main(capsys, *TRAIN, "--train-data", hostile, "--out", tmp_path / "run")
    assert code == 0, err[-2000:]
    step = tmp_path / "run" / "checkpoints" / "step_0000001"
    (tmp_path / "run" / "eval").mkdir()
    (tmp_path / "run" / "eval" / "zeroshot.json").write_text(json.dumps({
        "dataset": "zeroshot", "task": "<script>alert(2)</script>", "weights_sha256": sha256_of(step / "model.safetensors"),
        "ties": "strict", "precision": "fp32", "compclip_version": "0", "metrics": {"acc1": 0.5}}))
    code, _, err = run_main(capsys, "export", tmp_path / "run", tmp_path / "out", "--license", "mit")
    assert code == 0, err[-2000:]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "| training data | &lt;img src=x onerror=alert(1)&gt;.csv |" in card and "| zeroshot | acc1 | 0.5000 |" in card
    assert not re.search(r"<(img|script)", card, re.I), card


def test_every_run_folder_write_refuses_a_link_but_a_folder_the_user_linked_is_theirs(tmp_path, capsys):
    """`--out` itself may be a link the user made (runs -> /scratch): only what compclip writes inside it is checked."""
    data = make_dataset(tmp_path, n=8)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "scratch")
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(tmp_path / "run"))
    assert code == 0, err[-2000:]
    assert (tmp_path / "scratch" / "checkpoints" / "step_0000001" / "model.safetensors").is_file()


def test_a_lock_held_by_a_process_names_it(tmp_path):
    from compclip.io import FolderLock

    with FolderLock(tmp_path / ".lock", "a test"), \
            pytest.raises(UsageError, match=rf"{tmp_path} is in use by a test \(host .*, pid {os.getpid()}"):
        FolderLock(tmp_path / ".lock", "a test").acquire()
    FolderLock(tmp_path / ".lock", "a test").acquire().release()  # released: taken again


def test_a_checkpoint_write_killed_mid_way_leaves_nothing_after_the_next_write(tmp_path):
    """SIGKILL runs no `finally`: the killed writer's hidden copy is removed by the next write of the same folder (and a
    copy of a live process is left alone)."""
    import signal

    from compclip.io import atomic_dir

    target = tmp_path / "checkpoints" / "best"
    writer = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from compclip.io import atomic_dir\n"
        f"with atomic_dir(Path({str(target)!r})) as tmp:\n"
        "    (tmp / 'model.safetensors').write_bytes(bytes(1 << 20)); print('writing', flush=True); time.sleep(120)")],
        stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    live = subprocess.Popen([sys.executable, "-c", (
        "import time; from pathlib import Path; from compclip.io import atomic_dir\n"
        f"with atomic_dir(Path({str(target)!r})) as tmp:\n"
        "    print('writing', flush=True); time.sleep(120)")], stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "writing"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        hidden = sorted(p.name for p in target.parent.iterdir())
        assert len(hidden) == 2 and all(name.startswith(".best.") for name in hidden)
        with atomic_dir(target) as tmp:
            (tmp / "model.safetensors").write_bytes(b"new")
        left = sorted(p.name for p in target.parent.iterdir())
        assert left == sorted(["best", f".best.{next(n for n in hidden if f'-{live.pid}.' in n).split('.best.', 1)[1]}"])
    finally:
        live.kill()
        live.wait()


def test_blind_on_a_benchmark_of_one_image_is_said_and_not_reported_as_grounded(tmp_path, caplog):
    from PIL import Image

    from compclip.eval import EvalConfig, build_report, evaluate

    root = tmp_path / "data"
    (root / "sugarcrepe").mkdir(parents=True)
    (root / "coco" / "val2017").mkdir(parents=True)
    Image.new("RGB", (32, 24), (200, 30, 30)).save(root / "coco" / "val2017" / "000000000001.jpg")
    items = {str(i): {"filename": "000000000001.jpg", "caption": f"a red {obj} on a blue mat",
                      "negative_caption": f"a blue {obj} on a red mat"} for i, obj in enumerate(("cup", "box", "car"))}
    (root / "sugarcrepe" / "swap_att.json").write_text(json.dumps(items))
    records = evaluate(EvalConfig(model="compclip-tiny-clip", benchmark="sugarcrepe/swap_att", out=str(tmp_path / "one"),
                                  data_root=str(root), workers=0, device="cpu", blind=True))
    assert records["sugarcrepe/swap_att"]["blind_images"] == 1
    assert records["sugarcrepe/swap_att"]["blind"] == records["sugarcrepe/swap_att"]["metrics"]  # the degenerate case itself
    assert "equals the real one by construction" in caplog.text
    report = build_report([tmp_path / "one"], tmp_path / "report").read_text()
    grounded = report[report.index("Image-grounded"):]
    assert "| one | — |" in grounded and "| one | 0.0 |" not in grounded


def test_a_report_says_when_its_models_were_scored_at_other_precisions_or_versions(tmp_path):
    from compclip.eval.report import build_report

    for name, precision, version in (("a", "fp32", "0.9.0"), ("b", "amp_bf16", "0.9.0"), ("c", "fp32", "0.8.0")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sugarcrepe.json").write_text(json.dumps({
            "dataset": "sugarcrepe", "precision": precision, "compclip_version": version, "ties": "strict",
            "metrics": {"add": {"acc": 0.5, "n": 2}}}))
    report = build_report([tmp_path / n for n in "abc"], tmp_path / "report").read_text()
    assert "**Mixed precisions**" in report and "sugarcrepe (a: fp32, b: amp\\_bf16, c: fp32)".replace("\\_", "_") in report
    assert "**Mixed compclip versions**" in report and "**Mixed tie rules**" not in report
    same = build_report([tmp_path / "a"], tmp_path / "alone").read_text()
    assert "Mixed" not in same


# ---- damaged files: one line, not a traceback ---------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path):
    from compclip.concepts import build_store

    build_store([f"a red car number {i}" for i in range(30)], tmp_path / "store", what="keywords")
    return tmp_path / "store"


@pytest.mark.parametrize("damage", ["truncated", "object", "short"])
def test_a_damaged_store_index_is_named(store, damage):
    from compclip.concepts import ConceptStore

    index = json.loads((store / "index.json").read_text())
    array = store / index["hi"]
    if damage == "truncated":
        array.write_bytes(array.read_bytes()[:100])
    elif damage == "object":
        np.save(array, np.array([{"a": 1}] * 30, dtype=object), allow_pickle=True)
    else:
        np.save(array, np.arange(3, dtype=np.uint64))
    with pytest.raises(DataError, match=r"index.json: a damaged store index .*writes the index anew"):
        ConceptStore(store)


@pytest.mark.parametrize("text", ['{"format": 2, "config"', "[1, 2]", '{"format": 2}'])
def test_a_damaged_store_manifest_is_named(store, text, capsys):
    from compclip.concepts import ConceptStore

    (store / "manifest.json").write_text(text)
    with pytest.raises(DataError, match=r"manifest.json: a damaged store manifest"):
        ConceptStore(store)
    captions = store.parent / "c.csv"
    captions.write_text("caption\na blue bus\n")
    code, _, err = run_main(capsys, "-q", "concepts", str(captions), "--out", str(store), "--what", "keywords")
    one_error_line(code, err, "manifest.json: a damaged store manifest")


def test_latin1_captions_of_a_retrieval_set_are_named_by_line(tmp_path):
    from compclip.eval.benchmarks.retrieval import load_pairs

    file = tmp_path / "captions.csv"
    file.write_bytes(b"image,caption\na.jpg,a dog\n" * 1 + "b.jpg,a caf\u00e9 on a street\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"captions.csv:3: not UTF-8 \(byte e9\)"):
        load_pairs(file)
    # far into a file, past the reader's first chunk: still the right line
    file.write_bytes(b"image,caption\n" + b"a.jpg,a dog\n" * 20000 + "b.jpg,caf\u00e9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"captions.csv:20002: not UTF-8"):
        load_pairs(file)


def test_a_write_past_the_file_size_limit_is_one_line(tmp_path):
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
              "from compclip.io import write_json\n"
              "from compclip.errors import StorageError\n"
              f"try:\n    write_json({str(tmp_path / 'big.json')!r}, ['x' * 100] * 1000)\n"
              "except StorageError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "big.json: not written: the file would pass this process's file-size limit (ulimit -f)" in done.stdout
    assert not list(tmp_path.iterdir())  # no half-written file


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small /dev/shm in a mount namespace needs root (CI runs as root)")
@pytest.mark.parametrize("command", ["train", "eval"])
def test_too_little_shared_memory_for_the_workers_is_one_line_not_a_hang(tmp_path, command):
    """A real 256 KiB tmpfs on /dev/shm (in a mount namespace of the test's own): before, a worker's batch failed in its
    queue thread and the main process waited for it forever, deaf to SIGTERM."""
    data = make_dataset(tmp_path, n=32)
    if command == "train":
        args = [*TRAIN[1:-2], "--workers", "2", "--steps", "2", "--train-data", str(data), "--out", str(tmp_path / "run")]
    else:
        (tmp_path / "root" / "retrieval").mkdir(parents=True)
        (tmp_path / "root" / "retrieval" / "set").symlink_to(tmp_path)
        (tmp_path / "captions.csv").write_text(data.read_text())
        args = ["eval", "--model", "compclip-tiny-siglip", "--benchmark", "retrieval", "--data-root", str(tmp_path / "root"),
                "--workers", "2", "--batch-size", "16", "--out", str(tmp_path / "results")]
    shell = "mount -t tmpfs -o size=256k tmpfs /dev/shm && exec \"$0\" -m compclip -q \"$@\""
    done = subprocess.run(["unshare", "--mount", "sh", "-c", shell, sys.executable, *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    one_error_line(done.returncode, done.stderr, "/dev/shm has 0.2 MiB free, and 2 DataLoader workers would pass",
                   "--shm-size", "fewer --workers")
    assert not (tmp_path / "run").exists()


# ---- inputs that were mishandled ---------------------------------------------------------------------------------------


def test_shards_images_in_every_format_pil_reads_are_images(tmp_path):
    import io
    import tarfile

    from PIL import Image

    from compclip.data import WebDatasetReader

    shard = tmp_path / "shard-000.tar"
    with tarfile.open(shard, "w") as tar:
        for i, (ext, fmt) in enumerate((("gif", "GIF"), ("tif", "TIFF"), ("tiff", "TIFF"), ("bmp", "BMP"), ("jpeg", "JPEG"))):
            buffer = io.BytesIO()
            Image.new("RGB", (20, 16), (10 * i, 100, 200)).save(buffer, fmt)
            for name, payload in ((f"{i:04d}.{ext}", buffer.getvalue()), (f"{i:04d}.txt", f"picture {ext}".encode())):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    reader = WebDatasetReader(str(shard))
    samples = list(reader)
    assert sorted(s["caption"] for s in samples) == sorted(f"picture {e}" for e in ("gif", "tif", "tiff", "bmp", "jpeg"))
    assert all(s["image"].size == (20, 16) for s in samples)
    assert reader.stats() == {**dict.fromkeys(reader.stats(), 0), "read": 5}


def test_a_fifo_and_a_link_to_dev_zero_as_images_are_skipped_not_waited_on(tmp_path):
    """Neither the reader nor the hash of the images a resume compares (`image_files`, before training's first step)
    opens them: opening a FIFO waits for a writer, for ever, and /dev/zero reads without end. The hash names each once;
    the reader skips each as a corrupt image. In a process of its own, killed past its time: a hang fails."""
    data = make_dataset(tmp_path, n=8)
    os.mkfifo(tmp_path / "img" / "pipe.jpg")
    os.symlink("/dev/zero", tmp_path / "img" / "zero.jpg")
    data.write_text(data.read_text() + "img/pipe.jpg,a red square left of a blue circle\nimg/zero.jpg,a blue circle\n")
    script = ("from compclip.data import CsvReader, image_files\n"
              f"r = CsvReader({str(data)!r}); h = image_files(r)['images_hashed']; n = len(list(r));"
              "print(h, n, r.stats()['corrupt_image'])")
    done = run_tree([sys.executable, "-c", script], env=env_for_children(), timeout=60)  # the old code blocks
    assert done.stdout.split() == ["10", "8", "2"], done.stderr[-2000:]
    assert "pipe.jpg: ValueError: not a regular file (a FIFO)" in done.stderr
    said = [line for line in done.stderr.splitlines() if "resume's check" in line]
    assert len(said) == 1 and f"{data}:10 ({tmp_path / 'img' / 'pipe.jpg'}: not a regular file (a FIFO))" in said[0], said
    assert f"{data}:11 ({tmp_path / 'img' / 'zero.jpg'}: not a regular file (a character device))" in said[0]


def test_an_image_name_padded_with_spaces_is_found_by_eval_as_by_train(tmp_path):
    from compclip.data import CsvReader
    from compclip.eval.benchmarks.retrieval import load_pairs

    data = make_dataset(tmp_path, n=4)
    data.write_text(data.read_text().replace("img/", " img/").replace(".jpg,", ".jpg  ,"))
    pairs = load_pairs(data.rename(tmp_path / "captions.csv"))
    assert all(image.is_file() for image, _ in pairs)
    assert [c for _, _, c, _ in CsvReader(tmp_path / "captions.csv").records()] == [c for _, c in pairs]


def test_a_caption_longer_than_spacy_parses_and_than_csv_reads_is_kept(tmp_path, caplog):
    from compclip.concepts import extract
    from compclip.eval.benchmarks.retrieval import load_pairs

    long = "a red car " * 110_000  # 1.1 million characters
    records = extract(["a blue bus", long], what=("noun_phrases", "pos", "graph", "keywords"))
    assert records[0]["noun_phrases"] and records[1]["noun_phrases"] == [] and records[1]["graph"] == {"nodes": [], "edges": []}
    assert records[1]["keywords"]  # what needs no parse is still there
    assert "1 caption(s) longer than spaCy parses (1,000,000 characters" in caplog.text
    (tmp_path / "captions.csv").write_text(f"image,caption\na.jpg,{long}\n")
    assert load_pairs(tmp_path / "captions.csv")[0][1] == long


@pytest.mark.parametrize("key", ["annotations", "images"])
def test_coco_captions_with_a_null_list_are_one_line(tmp_path, capsys, key):
    coco = {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": "a dog"}]}
    coco[key] = None
    (tmp_path / "captions.json").write_text(json.dumps(coco))
    code, _, err = run_main(capsys, "-q", "concepts", str(tmp_path / "captions.json"), "--out", str(tmp_path / "store"))
    one_error_line(code, err, f'captions.json: COCO captions whose "{key}" is NoneType, not a list of records')


def test_coco_captions_whose_image_id_names_two_files_are_one_line(tmp_path, capsys):
    """Captions of id 1 paired with b.jpg alone, a.jpg dropped, was what reading them did; the same file listed twice is
    no conflict."""
    from compclip.data import open_reader

    data = make_dataset(tmp_path, n=8)
    images = [{"id": 1, "file_name": "img/0.jpg"}, {"id": 2, "file_name": "img/1.jpg"}, {"id": 1, "file_name": "img/2.jpg"}]
    coco = {"images": images, "annotations": [{"image_id": i % 2 + 1, "caption": f"caption {i}"} for i in range(8)]}
    (tmp_path / "captions.json").write_text(json.dumps(coco))
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(tmp_path / "captions.json"), "--out", str(tmp_path / "run"))
    one_error_line(code, err, f"{data.parent / 'captions.json'}: images[2] names image id 1 'img/2.jpg', an earlier record "
                   "'img/0.jpg'")
    images[2]["file_name"] = "img/0.jpg"
    (tmp_path / "captions.json").write_text(json.dumps(coco))
    assert len(list(open_reader(tmp_path / "captions.json"))) == 8


@pytest.mark.parametrize("damage", ["truncated", "other_key", "wrong_rows"])
def test_a_damaged_eval_cache_entry_is_encoded_again(tmp_path, caplog, damage):
    from safetensors.torch import save_file

    from compclip.eval import EvalConfig, evaluate

    data = make_dataset(tmp_path, n=6)
    (tmp_path / "root" / "retrieval").mkdir(parents=True)
    (tmp_path / "root" / "retrieval" / "set").symlink_to(tmp_path)
    (tmp_path / "captions.csv").write_text(data.read_text())

    def run(out):
        return evaluate(EvalConfig(model="compclip-tiny-clip", benchmark="retrieval", data_root=str(tmp_path / "root"),
                                   out=str(tmp_path / out), workers=0, device="cpu", cache=str(tmp_path / "cache")))

    first = run("a")["retrieval"]["metrics"]
    entries = sorted((tmp_path / "cache").rglob("images-*.safetensors"))
    assert len(entries) == 1
    if damage == "truncated":
        entries[0].write_bytes(entries[0].read_bytes()[:50])
    elif damage == "other_key":
        save_file({"features": torch.zeros(6, 64)}, entries[0])
    else:
        save_file({"embeddings": torch.zeros(2, 64)}, entries[0])
    again = run("b")["retrieval"]["metrics"]
    assert again == first and "a damaged cache entry" in caplog.text
    assert run("c")["retrieval"]["metrics"] == first  # the entry was written anew


def test_attention_out_an_existing_folder_is_one_line(tmp_path, capsys):
    from PIL import Image

    Image.new("RGB", (40, 32)).save(tmp_path / "photo.jpg")
    (tmp_path / "maps").mkdir()
    code, _, err = run_main(capsys, "-q", "attention", "--model", "compclip-tiny-siglip", "--image", str(tmp_path / "photo.jpg"),
                            "--concept", "a dog", "--out", str(tmp_path / "maps"))
    one_error_line(code, err, f"--out {tmp_path / 'maps'} is a folder", "attention.png")


def test_concepts_inside_a_slurm_array_says_it_parses_one_part(caplog):
    from compclip.concepts import parse_part

    assert parse_part(None, {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "10"}) == (3, 10)
    assert "task 3 of a SLURM array of 10: part 3/10 of the captions only" in caplog.text
    assert "--part 0/1 takes them all here" in caplog.text


def test_a_resume_refuses_data_edited_in_place_at_the_same_size(tmp_path, capsys):
    data = make_dataset(tmp_path, n=8)
    out = tmp_path / "run"
    assert run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(out), "--save-every", "1")[0] == 0
    text = data.read_text()
    edited = text.replace("a red square", "a der square")  # the same bytes, other captions
    assert len(edited) == len(text) and edited != text
    data.write_text(edited)
    code, _, err = run_main(capsys, *TRAIN[:-1], "2", "--train-data", str(data), "--out", str(out), "--save-every", "1")
    one_error_line(code, err, "names other files now (1 file of", "their contents differ: edited in place")


def test_a_resume_refuses_images_replaced_under_the_same_names_and_resumes_when_untouched(tmp_path, capsys):
    """The CSV unchanged, its images re-saved as other pixels (a re-extraction at another size, another crop): the run's
    data is not what it trained on. Touching the files alone (same bytes, new times) is no change."""
    from PIL import Image

    data = make_dataset(tmp_path, n=8)
    out = tmp_path / "run"
    assert run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(out), "--save-every", "1")[0] == 0
    for image in (tmp_path / "img").iterdir():
        os.utime(image)  # new times, the same bytes
    assert run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(out), "--save-every", "1")[0] == 0  # finished
    Image.open(tmp_path / "img" / "3.jpg").convert("RGB").resize((48, 48)).save(tmp_path / "img" / "3.jpg")
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(data), "--out", str(out), "--save-every", "1")
    one_error_line(code, err, f"--train-data {data} is the same file, but the images it names are not (8 of them hashed")


def test_the_images_a_resume_compares_are_spread_through_a_large_csv(tmp_path):
    """Of 600 records, 256 images are hashed, evenly spaced: one near the end among them, so a re-extraction of the last
    shards' images is seen too (what the first 256 alone would miss). Each is read whole up to 16 MiB: a start reads a
    bounded amount whatever the images are."""
    from compclip.data import image_files, open_reader
    from compclip.data.readers import IMAGES_HASHED

    (tmp_path / "img").mkdir()
    for i in range(600):
        (tmp_path / "img" / f"{i}.jpg").write_bytes(f"image {i}".encode())
    (tmp_path / "d.csv").write_text("image,caption\n" + "".join(f"img/{i}.jpg,a photo\n" for i in range(600)))
    before = image_files(open_reader(tmp_path / "d.csv"))
    assert before["images_hashed"] == IMAGES_HASHED == 256
    last = (IMAGES_HASHED - 1) * 600 // IMAGES_HASHED  # 597
    (tmp_path / "img" / f"{last}.jpg").write_bytes(b"another image")
    assert image_files(open_reader(tmp_path / "d.csv"))["images_sha256"] != before["images_sha256"]
    (tmp_path / "img" / f"{last}.jpg").write_bytes(f"image {last}".encode())
    assert image_files(open_reader(tmp_path / "d.csv")) == before
    # an image over 16 MiB is read at its ends alone: a byte changed in the middle is not seen, one at the end is
    (tmp_path / "img" / "0.jpg").write_bytes(bytes(17 << 20))
    large = image_files(open_reader(tmp_path / "d.csv"))
    with open(tmp_path / "img" / "0.jpg", "r+b") as f:
        f.seek(8 << 20)
        f.write(b"x")
    assert image_files(open_reader(tmp_path / "d.csv")) == large
    with open(tmp_path / "img" / "0.jpg", "r+b") as f:
        f.seek((17 << 20) - 1)
        f.write(b"x")
    assert image_files(open_reader(tmp_path / "d.csv")) != large


def test_an_in_training_evaluation_that_scores_nothing_is_said_and_logs_no_nan(tmp_path, capsys):
    data = make_dataset(tmp_path, n=8)
    root = tmp_path / "root"
    (root / "retrieval" / "set").mkdir(parents=True)
    (root / "retrieval" / "set" / "captions.csv").write_text("image,caption\ngone1.jpg,a dog\ngone2.jpg,a cat\n")
    code, _, err = run_main(capsys, *TRAIN[:-1], "2", "--train-data", str(data), "--out", str(tmp_path / "run"),
                            "--eval-benchmarks", "retrieval", "--eval-data-root", str(root), "--eval-every", "1",
                            "--report-to", "none")
    assert code == 0, err[-2000:]
    lines = (tmp_path / "run" / "log.jsonl").read_text().splitlines()
    assert all("NaN" not in line for line in lines) and [json.loads(line)["step"] for line in lines] == [1, 2]
    said = (tmp_path / "run" / "train.log").read_text()
    assert said.count("--eval-benchmarks retrieval: 9 of its 9 figures scored no example (2 images missing") == 2


def test_an_address_space_limit_too_low_for_torch_is_one_line(tmp_path):
    """`ulimit -v` (a scheduler's memory limit) below what torch's libraries map: an ImportError from deep inside torch."""
    data = make_dataset(tmp_path, n=8)
    done = subprocess.run(["bash", "-c", 'ulimit -v 1000000 && exec "$0" -m compclip "$@"', sys.executable, *TRAIN,
                           "--train-data", str(data), "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    one_error_line(done.returncode, done.stderr, "failed to map segment", "this process may map 1.0 GiB (ulimit -v)")
    assert not (tmp_path / "run").exists()


OUT_OF_MEMORY = """
import resource, sys
import torch
from compclip.cli import main
from compclip.models import load_model
load_model("compclip-tiny-clip")  # the libraries eval needs, mapped: the limit is met by the work, not by an import
size = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (20 << 20), resource.RLIM_INFINITY))
main(sys.argv[1:])
"""


def test_an_address_space_limit_reached_during_eval_is_one_line(tmp_path):
    """`ulimit -v` met mid-way (torch's CPU allocator refusing, not an import): 20 MiB above what the process already
    maps, on the 1,000 Flickr photos."""
    from conftest import shared_data

    (tmp_path / "retrieval").mkdir()
    (tmp_path / "retrieval" / "f8k").symlink_to(shared_data("flickr8k_1k"))
    done = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY, "eval", "--model", "compclip-tiny-clip", "--benchmark", "retrieval",
                           "--data-root", str(tmp_path), "--out", str(tmp_path / "out"), "--workers", "0", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    # which allocation meets the limit first depends on the machine: torch's CPU allocator (a RuntimeError) or Python's own
    one_error_line(done.returncode, done.stderr, "GiB (ulimit -v), less than torch and a model need")
    assert re.search(r"^error: (MemoryError|RuntimeError: .*can't allocate memory)", done.stderr, re.M), done.stderr[-3000:]
    assert not (tmp_path / "out" / "retrieval.json").exists()


TORCH_REFUSED = ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                 "268435456 bytes. Error code 12 (Cannot allocate memory)")


@pytest.mark.parametrize("limit", [None, 3 << 30], ids=["no-limit", "ulimit-v"])
def test_torch_refusing_an_allocation_is_told_as_memory_spent(monkeypatch, limit):
    """torch's CPU allocator raises a RuntimeError, not a MemoryError: its text is what marks it (the exact message of
    torch 2.x's alloc_cpu.cpp); any other RuntimeError is left to propagate."""
    from compclip import cli

    monkeypatch.setattr(cli, "_address_space_limit", lambda: limit)
    said = cli._out_of_memory(RuntimeError(TORCH_REFUSED))
    assert said is not None and said.startswith("error: ") and "DefaultCPUAllocator: can't allocate memory" in said
    assert ("3.0 GiB (ulimit -v)" in said) if limit else ("this machine's memory is spent" in said)
    assert cli._out_of_memory(MemoryError()) is not None
    assert cli._out_of_memory(RuntimeError("shape mismatch: can't broadcast")) is None


def test_a_hub_repository_whose_config_asks_for_remote_code_is_refused(hub_cache):
    """The same refusal for `hf-hub:`, served offline by huggingface_hub from its cache as a download would be."""
    import open_clip
    from safetensors.torch import save_file

    from conftest import plant_hub_repo

    source, _, _ = load_model("compclip-tiny-clip")
    cfg = open_clip.get_model_config("compclip-tiny-clip")
    cfg["text_cfg"] |= {"hf_tokenizer_name": "someone/rogue", "tokenizer_kwargs": {"trust_remote_code": True}}
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    plant_hub_repo(hub_cache, "someone/rogue", {"open_clip_config.json": json.dumps({"model_cfg": cfg}).encode(),
                                                "weights": lambda snapshot: save_file(state, snapshot / "open_clip_model.safetensors")})
    _, _, tokenizer = load_model("hf-hub:someone/rogue")
    with pytest.raises(DataError, match=r"hf-hub:someone/rogue: its open_clip_config.json asks to run the tokenizer's own Python"):
        tokenizer(["a red car"])


def test_an_object_array_as_training_data_is_one_line(tmp_path, capsys):
    array = tmp_path / "images.npy"
    np.save(array, np.array([{"pixels": 1}] * 4, dtype=object), allow_pickle=True)
    (tmp_path / "scenes.jsonl").write_text("".join('{"caption": "a dog"}\n' for _ in range(4)))
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(array), "--out", str(tmp_path / "run"))
    one_error_line(code, err, "images.npy: not an image array (ValueError: ", "Python objects in dtype", "expected uint8 images")


def test_an_image_array_with_more_captions_than_images_is_one_line(tmp_path, capsys):
    """Refused when the array is opened, naming both counts, not in a DataLoader worker that reads past the images."""
    np.save(tmp_path / "images.npy", np.zeros((4, 8, 8, 3), np.uint8))
    (tmp_path / "scenes.jsonl").write_text("".join(f'{{"caption": "a dog {i}"}}\n' for i in range(5)))
    code, _, err = run_main(capsys, *TRAIN, "--train-data", str(tmp_path / "images.npy"), "--out", str(tmp_path / "run"))
    one_error_line(code, err, f"{tmp_path / 'scenes.jsonl'}: 5 captions for the 4 images of {tmp_path / 'images.npy'}")


def test_results_of_other_weights_are_refused_before_the_model_loads(tmp_path, capsys):
    """The refusal comes first, from the file as it is (a damaged weights file would fail the load: it is never read);
    the weights as loaded are compared again before each result is written."""
    model, _, _ = load_model("compclip-tiny-clip")
    folder = save_checkpoint(model, tmp_path / "ckpt")
    out = tmp_path / "results"
    out.mkdir()
    (out / "retrieval.json").write_text(json.dumps({"dataset": "retrieval", "model": str(folder), "pretrained": "",
                                                    "weights_sha256": "0" * 64, "metrics": {}}))
    (folder / "model.safetensors").write_bytes(b"not weights")
    code, _, err = run_main(capsys, "-q", "eval", "--model", folder, "--benchmark", "retrieval", "--data-root", tmp_path,
                            "--out", out, "--device", "cpu")
    one_error_line(code, err, f"--out {out} holds results of another model")


def test_a_resume_on_an_image_array_refuses_its_captions_edited_beside_it(tmp_path, capsys):
    """World data: the images in `images.npy`, their captions in the `scenes.jsonl` beside it. A caption rewritten at the
    same size there, the array untouched, is other data too."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.save(tmp_path / "images.npy", rng.integers(0, 256, (8, 32, 32, 3), dtype=np.uint8))
    lines = [json.dumps({"caption": f"a {c} square"}) for c in ("red", "blue") * 4]
    (tmp_path / "scenes.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert run_main(capsys, *TRAIN, "--train-data", str(tmp_path / "images.npy"), "--out", str(out), "--save-every", "1")[0] == 0
    text = (tmp_path / "scenes.jsonl").read_text()
    (tmp_path / "scenes.jsonl").write_text(text.replace("a red square", "a der square", 1))
    code, _, err = run_main(capsys, *TRAIN[:-1], "2", "--train-data", str(tmp_path / "images.npy"), "--out", str(out), "--save-every", "1")
    one_error_line(code, err, "names other files now (2 files of", "their contents differ: edited in place")
