"""Settings read one way by every process: flags, then `UNCHAINED_*` environment variables,
then a TOML file, then the defaults (the order the README gives). The order is set here once,
through pydantic-settings' `settings_customise_sources`, so no app merges sources by hand.

Paths are made absolute where they come in, once: a relative path in the file is read from
the file's folder (the same file means the same thing wherever a process starts), one from a
flag, a variable or a default from the working directory (a default from the file's folder
where a class keeps its state beside its file).

Only pydantic, pydantic-settings and the error root are imported here, so that every app may
build on it."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from offchain.core.errors import UnchainedError

# `<prefix>CONFIG` names the file itself: the command reads it, it is no setting
FILE_VARIABLE = "config"
# What `load` does with its file: read it if it is there, refuse to go on without it, or only
# read relative paths from its folder (a command about to write the file, or there is none).
FileUse = Literal["if present", "required", "folder only"]


class SettingsFileError(UnchainedError, ValueError):
    """The settings file cannot be read or is not TOML; the message names the file."""


@dataclasses.dataclass(frozen=True)
class _Origin:
    """What one `load` reads besides its flags: the file's values, its folder, the variables."""

    file: dict[str, Any]
    folder: Path
    environ: Mapping[str, str]


_LOADING: ContextVar[_Origin | None] = ContextVar("settings_loading", default=None)


class LayeredSettings(BaseSettings):
    """A process's settings. `load` reads them in the project's order; built in code (tests,
    benches, a parent handing settings on) they hold the values given and nothing else, so no
    variable of the calling process leaks into them."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    # Variables outside the `env_prefix` scheme: name -> the field it sets ("section.field"
    # inside a section), read below the variable the prefix names for the same field.
    env_aliases: ClassVar[Mapping[str, str]] = {}
    # Relative default paths are read from the file's folder instead of the working directory.
    defaults_beside_file: ClassVar[bool] = False

    @classmethod
    def load(
        cls,
        toml: Path | None = None,
        flags: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        file: FileUse = "if present",
    ) -> Self:
        """Settings from `flags` (a None value, at any depth, is a flag not given), then
        `environ` (the process's by default), then the TOML file at `toml` (as `file` says),
        then the defaults. Raises SettingsFileError or pydantic's ValidationError."""
        values = {} if toml is None else _read(toml, file)
        folder = Path.cwd() if toml is None else toml.parent
        token = _LOADING.set(_Origin(values, folder, os.environ if environ is None else environ))
        try:
            return cls(**_given(flags or {}))
        finally:
            _LOADING.reset(token)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        origin = _LOADING.get()
        if origin is None:
            return (init_settings,)
        here = Path.cwd()
        return (
            _Absolute(init_settings, here),
            _Absolute(_Environment(cls, origin.environ), here),
            _Absolute(_Values(cls, origin.file), origin.folder),
            _Absolute(
                _Values(cls, _path_defaults(cls)),
                origin.folder if cls.defaults_beside_file else here,
            ),
        )


def _read(toml: Path, file: FileUse) -> dict[str, Any]:
    if file == "folder only" or (file == "if present" and not toml.exists()):
        return {}
    try:
        return tomllib.loads(toml.read_text())
    except OSError as exc:
        raise SettingsFileError(f"cannot read {toml}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsFileError(f"{toml}: not valid TOML: {exc}") from exc


def _given(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The flags given: None values dropped, in sections too."""
    return {
        name: _given(value) if isinstance(value, Mapping) else value
        for name, value in flags.items()
        if value is not None
    }


def _is_path(field: FieldInfo) -> bool:
    return field.annotation in (Path, Path | None)


def _section(field: FieldInfo) -> type[BaseModel] | None:
    """The model of a field that is a section of its own (a TOML table), else None."""
    kind = field.annotation
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _path_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Each path field's default, in sections too, for `_Absolute` to anchor."""
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        section = _section(field)
        if _is_path(field) and isinstance(field.default, Path):
            values[name] = field.default
        elif section is not None and (nested := _path_defaults(section)):
            values[name] = nested
    return values


def _anchored(model: type[BaseModel], values: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`values` with each relative path, in sections too, read from `folder`."""
    anchored = dict(values)
    for name, value in values.items():
        field = model.model_fields.get(name)
        if field is None:
            continue  # an unknown name: validation refuses it
        section = _section(field)
        if _is_path(field) and isinstance(value, str | os.PathLike):
            anchored[name] = (folder / value).resolve()
        elif section is not None and isinstance(value, dict):
            anchored[name] = _anchored(section, value, folder)
    return anchored


class _Values(PydanticBaseSettingsSource):
    """Values already read (the file's, the path defaults), as they are."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.values


class _Absolute(PydanticBaseSettingsSource):
    """Another source's values with their relative paths read from `folder`."""

    def __init__(self, source: PydanticBaseSettingsSource, folder: Path) -> None:
        super().__init__(source.settings_cls)
        self.source, self.folder = source, folder

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return _anchored(self.settings_cls, self.source(), self.folder)


class _Environment(EnvSettingsSource):
    """The variables in `environ`: `<prefix><FIELD>` for each field, then the class's
    `env_aliases`. Any other `<prefix>*` name comes through as an unknown field, so that a
    misspelt variable is refused as a misspelt key in the file is."""

    def __init__(self, settings_cls: type[LayeredSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env_vars = {name.lower(): value for name, value in environ.items()}
        self.aliases = {name.lower(): path for name, path in settings_cls.env_aliases.items()}

    def __call__(self) -> dict[str, Any]:
        values = super().__call__()
        for name, path in self.aliases.items():
            if name in self.env_vars:
                *sections, field = path.split(".")
                target = values
                for section in sections:
                    target = target.setdefault(section, {})
                target.setdefault(field, self.env_vars[name])
        prefix = self.env_prefix.lower()
        known = {*self.settings_cls.model_fields, FILE_VARIABLE}
        prefixed = {
            name.removeprefix(prefix): value
            for name, value in self.env_vars.items()
            if prefix and name.startswith(prefix) and name not in self.aliases
        }
        return values | {field: value for field, value in prefixed.items() if field not in known}
