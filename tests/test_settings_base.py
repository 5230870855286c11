"""Every process's settings in one order: flags, then `UNCHAINED_*` variables, then the TOML
file, then the defaults; paths made absolute where they come in; a misspelt variable refused."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsConfigDict

from offchain.core.settings import LayeredSettings, SettingsFileError


class Section(BaseModel):
    folder: Path = Path("inner")
    name: str = "section"


class Example(LayeredSettings):
    model_config = SettingsConfigDict(env_prefix="UNCHAINED_EXAMPLE_")
    env_aliases: ClassVar = {"EXAMPLE_URL": "url", "UNCHAINED_EXAMPLE_NAME": "section.name"}

    port: int = 1
    url: str = "default"
    data_dir: Path = Path("data")
    key: Path | None = None
    section: Section = Section()


class Beside(Example):
    defaults_beside_file = True


def test_flags_over_variables_over_the_file_over_the_defaults(tmp_path: Path):
    toml = tmp_path / "example.toml"
    toml.write_text('port = 3\nurl = "file"\n[section]\nname = "file"\n')
    env = {"UNCHAINED_EXAMPLE_PORT": "4", "UNCHAINED_EXAMPLE_NAME": "env"}
    assert Example.load(toml, {"port": 5}, env).port == 5
    assert Example.load(toml, {"port": None}, env).port == 4  # None: a flag not given
    loaded = Example.load(toml, {}, {})
    assert (loaded.port, loaded.url, loaded.section.name) == (3, "file", "file")
    assert Example.load(toml, {}, env).section.name == "env"  # an alias into a section
    assert Example.load(None, {}, {}).port == 1


def test_an_alias_is_read_below_the_prefixed_variable(tmp_path: Path):
    assert Example.load(None, {}, {"EXAMPLE_URL": "alias"}).url == "alias"
    both = {"EXAMPLE_URL": "alias", "UNCHAINED_EXAMPLE_URL": "own"}
    assert Example.load(None, {}, both).url == "own"


def test_paths_are_read_from_where_they_come_in(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "etc").mkdir()
    toml = tmp_path / "etc" / "example.toml"
    toml.write_text('key = "k.skey"\n[section]\nfolder = "s"\n')
    loaded = Example.load(toml, {"data_dir": Path("flagged")}, {})
    assert loaded.key == tmp_path / "etc" / "k.skey"  # the file's: beside it
    assert loaded.section.folder == tmp_path / "etc" / "s"
    assert loaded.data_dir == tmp_path / "flagged"  # a flag's: from the working directory
    from_env = Example.load(toml, {}, {"UNCHAINED_EXAMPLE_DATA_DIR": "env"})
    assert from_env.data_dir == tmp_path / "env"
    assert Example.load(toml, {}, {}).data_dir == tmp_path / "data"  # a default's too
    beside = Beside.load(toml, {}, {})
    assert beside.data_dir == tmp_path / "etc" / "data"
    assert beside.section.folder == tmp_path / "etc" / "s"
    assert Beside.load(toml, {}, {}, file="folder only").section.folder == (
        tmp_path / "etc" / "inner"
    )


def test_a_misspelt_variable_is_refused_and_the_files_own_is_not_a_setting():
    with pytest.raises(ValidationError, match="portt"):
        Example.load(None, {}, {"UNCHAINED_EXAMPLE_PORTT": "2"})
    assert Example.load(None, {}, {"UNCHAINED_EXAMPLE_CONFIG": "x.toml"}).port == 1


def test_the_file_as_asked(tmp_path: Path):
    absent = tmp_path / "absent.toml"
    assert Example.load(absent, {}, {}).port == 1
    with pytest.raises(SettingsFileError, match="cannot read"):
        Example.load(absent, {}, {}, file="required")
    broken = tmp_path / "broken.toml"
    broken.write_text("[port\n")
    with pytest.raises(SettingsFileError, match=r"broken\.toml: not valid TOML"):
        Example.load(broken, {}, {})
    assert Example.load(broken, {}, {}, file="folder only").port == 1
    broken.write_text("prot = 2\n")
    with pytest.raises(ValidationError, match="prot"):
        Example.load(broken, {}, {})


def test_built_in_code_settings_hold_what_they_are_given(monkeypatch):
    monkeypatch.setenv("UNCHAINED_EXAMPLE_PORT", "9")
    made = Example(data_dir=Path("relative"))
    assert (made.port, made.data_dir) == (1, Path("relative"))
    assert Example.load().port == 9  # the process's own variables
