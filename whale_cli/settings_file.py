"""A run's settings from a TOML file, with the command line on top: `--config FILE`.

The file holds `RunSettings` fields at its top level (or under `[run]`), spelled
as the dataclass spells them (`eval_every`, not `--eval-every`). Every key and
type is checked before anything starts; `whale config show` prints the resolved
settings in this same form, so its output is a valid file.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from whale_cli.run_settings import RunSettings
from whale_dspy.errors import ConfigError

TOML_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "tuple[str, ...]": (list,),
    "tuple[float, ...]": (list,),
}
"""RunSettings annotations (without `| None`) -> the TOML value types that may spell them."""


def read_settings_file(path: Path) -> dict[str, Any]:
    """The RunSettings fields a file sets, checked; ConfigError names the file and the key."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read the settings file {path}: {error}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from error
    data = data.get("run", data) if set(data) <= {"run"} else data
    known = {field.name: str(field.type) for field in fields(RunSettings)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)}; valid: {', '.join(known)}")
    for key, value in data.items():
        kind = known[key].removesuffix(" | None")
        allowed = TOML_TYPES[kind]
        wrong_bool = isinstance(value, bool) and bool not in allowed
        if not isinstance(value, allowed) or wrong_bool:
            raise ConfigError(f"{path}: {key} must be {kind}, got {value!r}")
        if kind == "tuple[str, ...]" and not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{path}: {key} must be a list of strings, got {value!r}")
        if kind == "tuple[float, ...]" and not all(
            isinstance(item, int | float) and not isinstance(item, bool) for item in value
        ):
            raise ConfigError(f"{path}: {key} must be a list of numbers, got {value!r}")
    return data


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings a command was given: its `--config` file's, then its flags' on top."""
    path = getattr(args, "config", None)
    given = read_settings_file(path) if path is not None else {}
    flags = {f.name: getattr(args, f.name, None) for f in fields(RunSettings)}
    return {**given, **{key: value for key, value in flags.items() if value is not None}}


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    return RunSettings(**given_settings(args))


def settings_toml(settings: RunSettings) -> str:
    """RunSettings as a settings file (None fields left out: they take their defaults)."""
    lines = []
    for key, value in asdict(settings).items():
        if value is not None:
            lines.append(f"{key} = {json.dumps(list(value) if isinstance(value, tuple) else value)}")
    return "\n".join(lines) + "\n"
