"""Published training recipes as data: one JSON file each in this folder, like open_clip's model configs.

A recipe names a paper's setting: the `compclip train` options it sets (`settings`, by `TrainConfig` field, the method's
options under `method_options`), where the paper or the authors' code gives each one (`cited`), and the settings the
paper leaves open that compclip chose (`choices`, each with its reason), and where the run differs from the paper or
the authors' code whatever the settings (`departures`: the method's own departures, docs/methods.md, and data the
recipe cannot ship). `compclip recipes` lists them; `compclip train
--recipe NAME` applies one, any flag given beside it winning (`Recipe.apply`), and the run's `config.json` records the
recipe and each setting the run changed (`Recipe.overrides`). Nothing here imports the trainer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..errors import UsageError
from ..text import did_you_mean

# A flag given beside a recipe replaces the recipe's way of saying the same thing: --steps its epochs, --accum-freq its
# global batch, --warmup its warm-up share.
ALTERNATIVES = {"steps": "epochs", "epochs": "steps", "accum_freq": "global_batch_size", "global_batch_size": "accum_freq",
                "warmup": "warmup_fraction", "warmup_fraction": "warmup"}


@dataclass(frozen=True)
class Recipe:
    name: str
    paper: str
    citation: str
    data: str
    numbers: dict[str, str]  # the paper's published row this recipe reproduces: `compclip report --paper P --paper-model M`
    settings: dict[str, Any]
    cited: dict[str, str]
    choices: dict[str, str]
    departures: list[str]  # printed when a run of the recipe starts, and by `compclip recipes`

    def setting_keys(self) -> list[str]:
        """Every setting's key, a method option as `method_options.KEY`."""
        flat = [k for k in self.settings if k != "method_options"]
        return flat + [f"method_options.{k}" for k in self.settings.get("method_options", {})]

    def value(self, key: str) -> Any:
        head, _, option = key.partition(".")
        return self.settings[head][option] if option else self.settings[head]

    def apply(self, given: dict[str, Any]) -> dict[str, Any]:
        """`TrainConfig`'s keyword arguments: the recipe's settings, then the `given` ones over them (method options key by
        key; a given alternative drops the recipe's: `ALTERNATIVES`; a given model drops the recipe model's weights tag).
        A global batch given is the user's: its accumulation, however long, is asked for (`accept_accum`), where the
        recipe's is refused past `RECIPE_ACCUMULATION_LIMIT` micro-batches a step."""
        dropped = {ALTERNATIVES.get(g) for g in given} | ({"pretrained"} if "model" in given else set())
        values = {k: v for k, v in self.settings.items() if k not in dropped}
        options = {**values.get("method_options", {}), **given.get("method_options", {})}
        values.update(given)
        values["method_options"] = options
        values["recipe"] = self.name
        if "global_batch_size" in given:
            values["accept_accum"] = True
        if isinstance(values.get("betas"), list):
            values["betas"] = tuple(values["betas"])
        return values

    def overrides(self, run: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """{key: {"recipe": value, "run": value}} for each setting of the recipe that the run's options (`asdict(cfg)`)
        do not keep."""
        out = {}
        for key in self.setting_keys():
            head, _, option = key.partition(".")
            used = run.get(head, {}).get(option) if option else run.get(head)
            wanted = self.value(key)
            if isinstance(wanted, list):
                wanted = tuple(wanted)
            if isinstance(used, list):
                used = tuple(used)
            if used != wanted:
                out[key] = {"recipe": self.value(key), "run": used}
        return out


def _check(recipe: Recipe, file: str) -> Recipe:
    """Every setting says where it comes from: cited, or compclip's choice, not both (that each is a train option,
    `tests/test_recipes.py` checks)."""
    keys = set(recipe.setting_keys())
    unsourced = sorted(keys - set(recipe.cited) - set(recipe.choices))
    both = sorted(set(recipe.cited) & set(recipe.choices))
    stray = sorted((set(recipe.cited) | set(recipe.choices)) - keys)
    if not isinstance(recipe.departures, list) or not all(isinstance(d, str) and d for d in recipe.departures):
        raise ValueError(f"recipe {file}: departures must be a list of sentences (an empty list: none)")
    for what, bad in (("settings neither cited nor marked a choice", unsourced),
                      ("settings both cited and marked a choice", both), ("sources of no setting", stray)):
        if bad:
            raise ValueError(f"recipe {file}: {what}: {', '.join(bad)}")
    return recipe


@cache
def _recipes() -> dict[str, Recipe]:
    found = {}
    for entry in sorted(resources.files(__name__).iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            recipe = _check(Recipe(**data), entry.name)
            found[recipe.name] = recipe
    return found


def list_recipes() -> list[str]:
    return sorted(_recipes())


def get_recipe(name: str) -> Recipe:
    """The recipe `name`; an unknown one is an error listing the known ones."""
    recipes = _recipes()
    if name not in recipes:
        raise UsageError(f"--recipe {name}: no such recipe{did_you_mean(name, recipes)}; known: {', '.join(sorted(recipes))} "
                         "(see `compclip recipes`)")
    return recipes[name]


__all__ = ["ALTERNATIVES", "Recipe", "get_recipe", "list_recipes"]
