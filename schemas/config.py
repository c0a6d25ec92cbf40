"""Loading YAML configs into pydantic models with one-line errors naming the file and key.

cfg = load_yaml_model("cur.yaml", CurationConfig, "curation config")
# ConfigError("cur.yaml: near_dedup.threshold: Input should be less than or equal to 1")
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from schemas.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def load_yaml_model(path: str | Path, model: type[M], what: str, *, show_input: bool = False) -> M:
    """``show_input`` adds the offending value (``, got 'many'``) to the message."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {what} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a {what} must be a mapping of keys")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(top)"
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"{path}: {key}: unknown key") from None
        got = f", got {err['input']!r}" if show_input and "input" in err else ""
        raise ConfigError(f"{path}: {key}: {err['msg'].removeprefix('Value error, ')}{got}") from None
