"""Tests of ember.prims.config: declaring settings, reading EMBER_* variables, cache keys."""

from __future__ import annotations

import dataclasses
import enum
from typing import Literal

import pytest

from ember.prims.config import (
    ConfigError,
    PrimsConfig,
    cache_key,
    config_class,
    load,
    setting,
    settings,
)


class Backend(enum.Enum):
    CPP = "cpp"
    TRITON = "triton"


@config_class
class ExampleConfig:
    """A config of every supported field type."""

    debug: bool = setting(False, env="EMBER_T_DEBUG", help="debug", cache_key=False)
    unroll: int = setting(4, env="EMBER_T_UNROLL", help="unroll factor", cache_key=True)
    ratio: float = setting(0.5, env="EMBER_T_RATIO", help="a ratio", cache_key=True)
    name: str = setting("x", env="EMBER_T_NAME", help="a name", cache_key=False)
    backend: Backend = setting(Backend.CPP, env="EMBER_T_BACKEND", help="codegen", cache_key=True)
    mode: Literal["default", "max-autotune"] = setting(
        "default", env="EMBER_T_MODE", help="mode", cache_key=True
    )


def test_defaults_without_environment() -> None:
    config = load(ExampleConfig, {})
    assert config == ExampleConfig()
    assert config.unroll == 4 and config.backend is Backend.CPP


def test_every_type_parses_from_its_variable() -> None:
    environ = {
        "EMBER_T_DEBUG": "yes",
        "EMBER_T_UNROLL": "8",
        "EMBER_T_RATIO": "0.25",
        "EMBER_T_NAME": "hello",
        "EMBER_T_BACKEND": "TRITON",
        "EMBER_T_MODE": "max-autotune",
    }
    config = load(ExampleConfig, environ)
    assert config == ExampleConfig(True, 8, 0.25, "hello", Backend.TRITON, "max-autotune")


@pytest.mark.parametrize("raw", ["1", "true", "True", "on", "YES"])
def test_true_spellings(raw: str) -> None:
    assert load(ExampleConfig, {"EMBER_T_DEBUG": raw}).debug is True


@pytest.mark.parametrize("raw", ["0", "false", "off", "No"])
def test_false_spellings(raw: str) -> None:
    assert load(ExampleConfig, {"EMBER_T_DEBUG": raw}).debug is False


def test_empty_variable_keeps_default() -> None:
    assert load(ExampleConfig, {"EMBER_T_UNROLL": "  "}).unroll == 4


@pytest.mark.parametrize(
    ("variable", "raw", "expected"),
    [
        ("EMBER_T_DEBUG", "maybe", "is not a boolean"),
        ("EMBER_T_UNROLL", "2.5", "is not an integer"),
        ("EMBER_T_RATIO", "half", "is not a number"),
        ("EMBER_T_BACKEND", "cuda", "is not one of: cpp, triton"),
        ("EMBER_T_MODE", "fast", "is not one of: default, max-autotune"),
    ],
)
def test_bad_values_name_the_variable(variable: str, raw: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(ExampleConfig, {variable: raw})
    assert variable in str(caught.value) and expected in str(caught.value)


def test_config_is_frozen() -> None:
    config = load(ExampleConfig, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.unroll = 2  # type: ignore[misc]


def test_cache_key_holds_only_cache_key_settings() -> None:
    key = cache_key(ExampleConfig(unroll=2))
    assert key == (
        ("EMBER_T_UNROLL", 2),
        ("EMBER_T_RATIO", 0.5),
        ("EMBER_T_BACKEND", Backend.CPP),
        ("EMBER_T_MODE", "default"),
    )
    assert cache_key(ExampleConfig(debug=True)) == cache_key(ExampleConfig())


def test_settings_describe_each_field() -> None:
    rows = {info.name: info for info in settings(ExampleConfig)}
    assert rows["mode"].type_name == "'default' | 'max-autotune'"
    assert rows["backend"].type_name == "'cpp' | 'triton'"
    assert rows["unroll"].type_name == "int" and rows["unroll"].default == 4


def test_field_without_setting_is_rejected() -> None:
    with pytest.raises(ConfigError, match="not declared with setting"):

        @config_class
        class Bad:
            plain: int = 3


def test_duplicate_variable_is_rejected() -> None:
    with pytest.raises(ConfigError, match="EMBER_T_X is used by both a and b"):

        @config_class
        class Bad:
            a: int = setting(1, env="EMBER_T_X", help="a", cache_key=False)
            b: int = setting(2, env="EMBER_T_X", help="b", cache_key=False)


def test_variable_must_be_ember_prefixed_and_documented() -> None:
    with pytest.raises(ConfigError, match="must start with 'EMBER_'"):
        setting(1, env="TORCH_X", help="x", cache_key=False)
    with pytest.raises(ConfigError, match="needs help text"):
        setting(1, env="EMBER_X", help=" ", cache_key=False)


def test_unsupported_type_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unsupported setting type"):

        @config_class
        class Bad:
            sizes: list = setting(None, env="EMBER_T_SIZES", help="sizes", cache_key=False)  # type: ignore[type-arg]


def test_prims_config_variables() -> None:
    config = load(
        PrimsConfig,
        {"EMBER_SERIALIZE_BOUNDARIES": "1", "EMBER_VERIFY": "true", "EMBER_LOGS": "+guards"},
    )
    assert config == PrimsConfig(serialize_boundaries=True, verify_passes=True, logs="+guards")
    assert load(PrimsConfig, {}) == PrimsConfig()
    assert {info.env for info in settings(PrimsConfig)} >= {
        "EMBER_SERIALIZE_BOUNDARIES",
        "EMBER_VERIFY",
        "EMBER_LOGS",
    }


def test_load_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_VERIFY", "1")
    assert load(PrimsConfig).verify_passes is True
