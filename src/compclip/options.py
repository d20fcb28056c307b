"""Declared options: a dataclass per owner (a run, a world, a method, a benchmark), each field with its default and help.

The command line is generated from these declarations (`compclip.cli`): a run's and a world's fields are its flags;
`compclip methods` and `compclip benchmarks` list the rest, which `--method-opt KEY=VALUE` and `--bench-opt
NAME.KEY=VALUE` set, parsed here as the field's declared type. A key nobody declares is an error listing the valid ones.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from .errors import UsageError
from .text import did_you_mean

MODEL_HELP = "open_clip name (e.g. ViT-B-16-SigLIP, compclip-tiny-siglip), hf-hub: id, or compclip checkpoint folder."


def option(default: Any = dataclasses.MISSING, help: str = "", *, flag: str | tuple[str, ...] | None = None, factory: Any = None,
           parse: Any = None, aliases: tuple[str, ...] = (), metavar: str | None = None, names: str | None = None) -> Any:
    """An option: a dataclass field with its default (none: required; `factory`: a fresh mutable one) and the one-line
    help its flag and listing show. `flag` names the command-line flag when it is not `--field-name`; a tuple field
    takes one flag per element; a dict field takes repeated KEY=VALUE items, or what `parse` reads from them. `aliases`
    are other flags of the same meaning (open_clip_train's name where compclip's differs). `metavar` is what help shows
    for its value; `names`, the kind of name it takes ("method", "benchmark": `compclip.names`), which shell completion
    offers."""
    metadata = {"help": help, **({"flag": flag} if flag else {}), **({"parse": parse} if parse else {}),
                **({"aliases": aliases} if aliases else {}), **({"metavar": metavar} if metavar else {}),
                **({"names": names} if names else {})}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_flag(f: dataclasses.Field) -> str | tuple[str, ...]:
    """The command-line flag of a declared field: its own, else `--field-name` (a tuple field: one flag per element)."""
    return f.metadata.get("flag", "--" + f.name.replace("_", "-"))


def flag_of(cls: type, name: str) -> str:
    """The command-line flag of the field `name` of the declaration `cls`, for error messages."""
    flag = field_flag(next(f for f in dataclasses.fields(cls) if f.name == name))
    return flag if isinstance(flag, str) else " and ".join(flag)


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """An owner without options."""


def parse_value(text: str, kind: Any, where: str) -> Any:
    """A command-line string as the declared type (int, float, bool, str, or one of them or None); `where` names it in errors."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if args and len(args) < len(typing.get_args(kind)):  # X | None
        return None if text.lower() in ("none", "null", "") else parse_value(text, args[0], where)
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise UsageError(f"{where}={text}: expected true or false")
        return text.lower() in ("true", "1", "yes")
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"{where}={text}: expected {kind.__name__}") from None


def make_options(declared: list[type], given: Mapping[str, Any], *, owner: str, flag: str, listing: str) -> list[Any]:
    """One options instance per declared dataclass, from `given` ({key: value or command-line string}).

    `owner` ("method c2lip"), `flag` (how the command line names a key: "--method-opt {key}") and `listing`
    ("compclip methods") word the errors.
    """
    valid = {f.name for cls in declared for f in dataclasses.fields(cls)}
    unknown = sorted(set(given) - valid)
    if unknown:
        hints = "".join(did_you_mean(k, valid) for k in unknown)
        known = ", ".join(sorted(valid)) or "none"
        raise UsageError(f"{owner} has no option {', '.join(unknown)}{hints}; its options: {known} (see `{listing}`)")
    made = []
    for cls in declared:
        hints = typing.get_type_hints(cls)
        values = {f.name: given[f.name] for f in dataclasses.fields(cls) if f.name in given}
        made.append(cls(**{k: parse_value(v, hints[k], flag.format(key=k)) if isinstance(v, str) and hints[k] is not str else v
                           for k, v in values.items()}))
    return made


def key_values(items: list[str], flag: str, example: str) -> dict[str, str]:
    """`KEY=VALUE` command-line items as a dict; a malformed one is an error naming `flag`."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {example}")
        pairs[key.strip()] = value.strip()
    return pairs
