"""compclip in a Jupyter notebook, executed headless by a real kernel (nbclient): what a researcher runs in one, and what
the notebook then shows."""
import json
import re

import nbclient
import nbformat

from test_train import make_dataset


def visible_lines(text: str) -> list[str]:
    """What a notebook shows of a stream: each line as its last carriage return leaves it."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.rsplit("\r", 1)[-1].strip()]


def test_a_notebook_trains_and_reads_results_with_one_bar_each_and_no_widget_warning(tmp_path, swap_root):
    """Training and evaluating from a notebook: each progress bar is one line redrawn in place (no "IProgress not found",
    no line per update, where ipywidgets is not installed), and `load_results` names the folder by the `name=` given."""
    data = make_dataset(tmp_path, n=16)
    code = f"""
import compclip
from compclip.train import TrainConfig, train
from compclip.progress import QUIET_UNDER
train(TrainConfig(method="siglip", model="compclip-tiny-siglip", train_data={str(data)!r}, out={str(tmp_path / "run")!r},
                  steps=3, batch_size=8, workers=0))
model, preprocess, tokenizer = compclip.load_model({str(tmp_path / "run")!r})
compclip.evaluate(model, preprocess, tokenizer, "sugarcrepe/swap_att", data_root={str(swap_root)!r}, name="my run",
                  out={str(tmp_path / "results")!r}, workers=0)
print(sorted(set(compclip.load_results({str(tmp_path / "results")!r})["model"])))
"""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(tmp_path))
    outputs = nb.cells[0].outputs
    stderr = "".join(o["text"] for o in outputs if o.get("name") == "stderr")
    stdout = "".join(o["text"] for o in outputs if o.get("name") == "stdout")
    assert "IProgress" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    bars = [line for line in visible_lines(stderr) if re.search(r"(it/s|step/s|s/step)[\],]", line)]  # a rate, then the postfix or the end
    training = [line for line in bars if line.startswith("train siglip (run):")]
    assert len(training) == 1 and "100%" in training[0] and "3/3" in training[0], visible_lines(stderr)
    assert stderr.count("train siglip (run):") > 1  # redrawn: carriage returns, one visible line
    assert stdout.strip().splitlines()[-1] == json.dumps(["my run"]).replace('"', "'"), stdout
