"""The README's quick tour, run as written: every command on the real Flickr8k photos, as a user types them."""
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import shared_data

README = Path(__file__).resolve().parents[1] / "README.md"


def tour_commands() -> str:
    match = re.search(r"<!-- quick-tour -->\n```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert match, "README.md lost its quick-tour block"
    return match.group(1)


def test_the_readme_quick_tour_runs_as_written(tmp_path):
    flickr = shared_data("flickr8k_1k")
    script = tour_commands().replace("F=../shared/data/flickr8k_1k", f"F={flickr}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tour = tmp_path / "runs" / "tour"
    for made in ("concepts/manifest.json", "c2lip/checkpoints/step_0000020/model.safetensors", "results/base/retrieval.json",
                 "results/c2lip/retrieval.json", "report/report.md", "report/summary.csv", "attention.png", "c2lip-hf/model.safetensors",
                 "c2lip-hf/README.md"):
        assert (tour / made).is_file(), made
    assert "nothing evaluated" not in result.stdout and "retrieval: mean_recall@1" in result.stdout
    assert "note: tokenizer:" in result.stdout and "open_clip.SimpleTokenizer(context_length=64)" in result.stdout
    assert "| retrieval | mean_recall@1 |" in (tour / "c2lip-hf" / "README.md").read_text()  # the card found its scores
