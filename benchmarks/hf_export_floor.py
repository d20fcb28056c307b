"""The transformers export read by the oldest transformers pyproject.toml allows: each model exported here, loaded
there (CLIPModel's towers with projection, AutoTokenizer, SiglipModel), and its features set beside open_clip's.

Run: COMPCLIP_TRANSFORMERS_FLOOR_PYTHON=/path/to/python-with-transformers-4.40 .venv/bin/python benchmarks/hf_export_floor.py MODEL
"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import open_clip
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from compclip.export import export
from compclip.models import load_model, save_checkpoint
from test_export import CAPTIONS, FLOOR_SCRIPT

name = sys.argv[1]
tmp = tempfile.mkdtemp()
model, _, tok = load_model(name, init_seed=4)
out, _, _ = export(save_checkpoint(model, f"{tmp}/{name}/ck"), f"{tmp}/{name}/hf", "hf", force=True)
s, _, stok = load_model("compclip-tiny-siglip-hf", init_seed=5)
sout, _, _ = export(save_checkpoint(s, f"{tmp}/{name}/sck"), f"{tmp}/{name}/shf", "hf", force=True)
size = model.visual.image_size[0]
pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
torch.save(pixels, f"{tmp}/p.pt")
spix = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))
script = FLOOR_SCRIPT.replace("get_image_features(pixel_values=pixels)", "get_image_features(pixel_values=torch.load('" + tmp + "/s.pt'))")
torch.save(spix, f"{tmp}/s.pt")
floor = os.environ["COMPCLIP_TRANSFORMERS_FLOOR_PYTHON"]
r = subprocess.run([floor, "-c", script, str(out), str(sout), f"{tmp}/p.pt", json.dumps(CAPTIONS),
                    json.dumps([open_clip.tokenizer.canonicalize_text(c) for c in CAPTIONS])], capture_output=True, text=True)
got = json.loads(r.stdout.splitlines()[-1])
with torch.no_grad():
    print(name, "transformers", got["version"], "projection", model.text_projection.shape[1],
          "image", f"{(torch.tensor(got['image']) - model.encode_image(pixels)).abs().max():.1e}",
          "text", f"{(torch.tensor(got['text']) - model.encode_text(tok(CAPTIONS))).abs().max():.1e}",
          "siglip image", f"{(torch.tensor(got['siglip_image']) - s.encode_image(spix)).abs().max():.1e}",
          "ids equal", torch.equal(torch.tensor(got['ids'])[tok(CAPTIONS) != 0], tok(CAPTIONS)[tok(CAPTIONS) != 0]))
