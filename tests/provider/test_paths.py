"""Paths are made absolute where they come in (flags, `UNCHAINED_*` variables, defaults, the
TOML file), once: docker refuses relative mounts, and a runner is named by its state directory,
which must not change with the directory a command is started in."""

from __future__ import annotations

import tomllib

import pytest
from typer.testing import CliRunner

from provider.config import RunnerSettings, load_config
from provider.sandbox.runner import runner_id
from unchained.cli import app

OFFER = "[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n"


def init(*args: str, env: dict[str, str] | None = None) -> dict:
    """`unchained provider init` with `args`; the config it wrote, read back."""
    result = CliRunner().invoke(app, ["provider", "init", "--cpu-cores", "1", *args], env=env)
    assert result.exit_code == 0, result.output
    written = result.stdout.splitlines()[0].removeprefix("wrote ")
    return {"path": written, **tomllib.loads(open(written).read())}


def test_a_relative_state_dir_in_the_file_is_read_from_the_files_folder(tmp_path, monkeypatch):
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "provider.toml").write_text(OFFER + '[runner]\nstate_dir = "../var/state"\n')
    for cwd in (tmp_path, folder):
        monkeypatch.chdir(cwd)
        config = load_config(folder / "provider.toml")
        assert config.runner.state_dir == tmp_path / "var" / "state"


def test_without_a_state_dir_the_state_lives_beside_the_file(tmp_path, monkeypatch):
    (tmp_path / "provider.toml").write_text(OFFER)
    monkeypatch.chdir("/")
    assert load_config(tmp_path / "provider.toml").runner.state_dir == tmp_path / "state"


def test_code_must_give_an_absolute_state_dir(tmp_path):
    with pytest.raises(ValueError, match="relative; give an absolute path"):
        RunnerSettings(state_dir="data/state")
    with pytest.raises(ValueError, match="relative"):
        RunnerSettings()  # the default is only meaningful beside a config file
    assert RunnerSettings(state_dir=tmp_path).state_dir == tmp_path


def test_the_default_config_and_state_dir_are_made_absolute_from_where_init_runs(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    written = init()
    assert written["path"] == str(tmp_path / "data" / "provider" / "provider.toml")
    assert written["runner"]["state_dir"] == str(tmp_path / "data" / "provider" / "state")
    assert (tmp_path / "data" / "provider" / "state" / "provider.skey").exists()


def test_relative_flags_and_environment_variables_are_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flags = init("--config", "a/provider.toml", "--state-dir", "a/state")
    assert flags["runner"]["state_dir"] == str(tmp_path / "a" / "state")
    env = {"UNCHAINED_PROVIDER_CONFIG": "b/provider.toml", "UNCHAINED_PROVIDER_STATE_DIR": "s"}
    from_env = init(env=env)
    assert from_env["path"] == str(tmp_path / "b" / "provider.toml")
    assert from_env["runner"]["state_dir"] == str(tmp_path / "s")


def test_the_runner_is_the_same_whatever_directory_it_starts_in(tmp_path, monkeypatch):
    (tmp_path / "provider.toml").write_text(OFFER + '[runner]\nstate_dir = "state"\n')
    names = set()
    for cwd in (tmp_path, tmp_path.parent, "/"):
        monkeypatch.chdir(cwd)
        names.add(runner_id(load_config(tmp_path / "provider.toml").runner.state_dir))
    assert len(names) == 1
