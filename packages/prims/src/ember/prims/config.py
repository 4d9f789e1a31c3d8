"""The configuration base every ember layer uses, and ember-prims' own settings.

Each layer declares one frozen dataclass with `@config_class`; each field is a `setting(...)`
with one `EMBER_*` environment variable, help text, a default, and whether it enters the
compile cache key. `load(ConfigClass)` reads the environment; `docs/configuration.md` is
generated from the declarations by `scripts/gen_config_docs.py`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, dataclass_transform

from ember.prims.errors import PrimsError

__all__ = [
    "ConfigError",
    "PrimsConfig",
    "Setting",
    "SettingInfo",
    "cache_key",
    "config_class",
    "load",
    "setting",
    "settings",
]

T = TypeVar("T")
C = TypeVar("C")

_METADATA_KEY = "ember.setting"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ConfigError(PrimsError, ValueError):
    """A configuration declaration or an `EMBER_*` environment variable is invalid."""


@dataclass(frozen=True)
class Setting:
    """What `setting()` attaches to a config field: its variable, help and cache-key role."""

    env: str
    help: str
    cache_key: bool


@dataclass(frozen=True)
class SettingInfo:
    """One declared setting as the docs and `load` see it."""

    name: str
    env: str
    help: str
    cache_key: bool
    type: Any
    default: Any

    @property
    def type_name(self) -> str:
        return _type_name(self.type)


def setting(default: T, *, env: str, help: str, cache_key: bool) -> T:
    """Declare one config field: its default, its `EMBER_*` variable, its help text, and
    whether a change of its value must change the compile cache key."""
    if not env.startswith("EMBER_"):
        raise ConfigError(f"setting variable {env!r} must start with 'EMBER_'")
    if not help.strip():
        raise ConfigError(f"setting {env} needs help text")
    info = Setting(env=env, help=help.strip(), cache_key=cache_key)
    field: T = dataclasses.field(default=default, metadata={_METADATA_KEY: info})
    return field


@dataclass_transform(frozen_default=True, field_specifiers=(setting,))
def config_class(cls: type[C]) -> type[C]:
    """Make `cls` a frozen dataclass whose every field is a `setting()` with a distinct variable."""
    frozen: type[C] = dataclass(frozen=True)(cls)
    seen: dict[str, str] = {}
    for field in dataclasses.fields(frozen):  # type: ignore[arg-type]
        info = field.metadata.get(_METADATA_KEY)
        if not isinstance(info, Setting):
            raise ConfigError(
                f"{cls.__qualname__}.{field.name} is not declared with setting(...): every "
                "config field needs an EMBER_* variable, help text and a cache-key choice"
            )
        if info.env in seen:
            raise ConfigError(
                f"{cls.__qualname__}: {info.env} is used by both {seen[info.env]} and {field.name}"
            )
        seen[info.env] = field.name
        _parser(_field_type(frozen, field.name), info.env)  # rejects unsupported types now
    return frozen


def settings(config: type[Any] | object) -> Iterator[SettingInfo]:
    """The declared settings of a config class (or instance), in declaration order."""
    cls = config if isinstance(config, type) else type(config)
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls.__qualname__} is not a config class (use @config_class)")
    for field in dataclasses.fields(cls):
        info = field.metadata.get(_METADATA_KEY)
        if not isinstance(info, Setting):
            raise ConfigError(f"{cls.__qualname__}.{field.name} is not declared with setting(...)")
        yield SettingInfo(
            name=field.name,
            env=info.env,
            help=info.help,
            cache_key=info.cache_key,
            type=_field_type(cls, field.name),
            default=field.default,
        )


def load(cls: type[C], environ: Mapping[str, str] | None = None) -> C:
    """An instance of config class `cls` with each field read from its `EMBER_*` variable
    in `environ` (default: `os.environ`); unset or empty variables keep the default."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for info in settings(cls):
        raw = environ.get(info.env)
        if raw is None or raw.strip() == "":
            continue
        values[info.name] = _parser(info.type, info.env)(raw.strip())
    return cls(**values)


def cache_key(config: object) -> tuple[tuple[str, Any], ...]:
    """The (variable, value) pairs of `config` that enter the compile cache key."""
    return tuple(
        (info.env, getattr(config, info.name)) for info in settings(config) if info.cache_key
    )


# ------------------------------------------------------------------------------------------
# Parsing one variable: bool, int, float, str, an Enum or a Literal of strings.


def _field_type(cls: type[Any], name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(repr(member.value) for member in tp)
    return getattr(tp, "__name__", str(tp))


def _parser(tp: Any, env: str) -> Callable[[str], Any]:
    if tp is bool:
        return lambda raw: _parse_bool(raw, env)
    if tp is int or tp is float:
        return lambda raw: _parse_number(raw, env, tp)
    if tp is str:
        return lambda raw: raw
    if typing.get_origin(tp) is Literal:
        choices = typing.get_args(tp)
        if not all(isinstance(choice, str) for choice in choices):
            raise ConfigError(f"{env}: only Literal types of strings are supported")
        return lambda raw: _parse_choice(raw, env, {choice: choice for choice in choices})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda raw: _parse_choice(raw, env, {str(m.value).lower(): m for m in tp})
    raise ConfigError(
        f"{env}: unsupported setting type {tp!r} (use bool, int, float, str, an Enum or a Literal)"
    )


def _parse_bool(raw: str, env: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{env}={raw!r} is not a boolean: use one of {', '.join(_TRUE + _FALSE)}")


def _parse_number(raw: str, env: str, tp: type[int] | type[float]) -> int | float:
    try:
        return tp(raw)
    except ValueError:
        kind = "an integer" if tp is int else "a number"
        raise ConfigError(f"{env}={raw!r} is not {kind}") from None


def _parse_choice(raw: str, env: str, choices: Mapping[str, Any]) -> Any:
    key = raw.lower()
    if key in choices:
        return choices[key]
    if raw in choices:
        return choices[raw]
    raise ConfigError(f"{env}={raw!r} is not one of: {', '.join(choices)}")


# ------------------------------------------------------------------------------------------
# ember-prims' own settings.


@config_class
class PrimsConfig:
    """Settings of ember-prims that every layer shares: boundaries, verification, logs."""

    serialize_boundaries: bool = setting(
        False,
        env="EMBER_SERIALIZE_BOUNDARIES",
        help="Send every Graph that crosses a layer boundary through dumps/loads, proving the "
        "layers share nothing but the serialized format (the integration tests turn it on).",
        cache_key=False,
    )
    verify_passes: bool = setting(
        False,
        env="EMBER_VERIFY",
        help="Verify the Graph after every pass (Graph.verify: references, order, specs "
        "against op schemas), not only on load. Slower; for debugging a pass.",
        cache_key=False,
    )
    logs: str = setting(
        "",
        env="EMBER_LOGS",
        help="Comma-separated log topics and layers to print, each optionally prefixed with "
        "'+' (debug) or '-' (off); see 'Logging' below.",
        cache_key=False,
    )
