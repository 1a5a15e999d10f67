"""The model catalogue (MODELS_FILE): the models users pick from, their endpoints and
prices, and the named personas.

The file is TOML::

    [models.fast]                 # the name users see and pick
    model = "gpt-4o-mini"         # the id sent to the endpoint
    base_url = "https://api.openai.com/v1"   # optional, default OPENAI_BASE_URL
    api_key_env = "OPENAI_API_KEY"           # optional: the variable holding the key
    vision = true                 # optional (default true)
    context_tokens = 32000        # optional, default CONTEXT_TOKEN_BUDGET
    price_input = 0.15            # optional: USD per million prompt tokens
    price_cached_input = 0.075    # optional
    price_output = 0.60           # optional
    default = true                # exactly one model is the default

    [personas.coder]
    prompt_file = "config/personas/coder.txt"   # or: prompt = "You are ..."
    model = "fast"                # optional: the persona's model

Without a file the catalogue is one model built from OPENAI_BASE_URL, OPENAI_API_KEY,
OPENAI_MODEL and the PRICE_* settings, named by its model id, so a bot set up with
those alone behaves as it always did. A bad file is one :class:`CatalogueError` line
naming the file, the table and the key; a key's value is never part of it.

:class:`Models` holds one client per catalogue model (they share one wire cache: a
stored message encodes the same for every model).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the settings check reads the file before the client's imports load
    from .model.client import ModelClient

#: The kinds of choice a node may carry (bot/turn/branch.py): a model, a persona.
MODEL, PERSONA = "m", "p"
#: A name users pick (and the bot keeps in Redis records and button data): short, and
#: free of the separators those use.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_KEYS = frozenset(
    {
        "model", "base_url", "api_key_env", "vision", "context_tokens", "price_input",
        "price_cached_input", "price_output", "default",
    }
)  # fmt: skip
_PERSONA_KEYS = frozenset({"prompt", "prompt_file", "model"})
#: The key variable whose value the settings already hold (it may come from .env).
OPENAI_KEY_ENV = "OPENAI_API_KEY"


class _Tokens(Protocol):
    @property
    def prompt(self) -> int: ...
    @property
    def cached(self) -> int: ...
    @property
    def completion(self) -> int: ...


class CatalogueError(Exception):
    """A bad MODELS_FILE, in one line: the file, the table, the key, the problem."""


@dataclass(frozen=True, slots=True)
class Prices:
    """USD per million tokens; all zero means no price table."""

    input: float = 0.0
    cached_input: float = 0.0
    output: float = 0.0

    @property
    def configured(self) -> bool:
        return bool(self.input or self.cached_input or self.output)

    def dollars(self, prompt: int, cached: int, completion: int) -> float:
        """What a call of these tokens costs (cached prompt tokens at the cached price)."""
        uncached = max(0, prompt - cached)
        return (uncached * self.input + cached * self.cached_input + completion * self.output) / 1e6

    def cost(self, totals: _Tokens) -> float:
        """What ``totals``' tokens cost at these prices."""
        return self.dollars(totals.prompt, totals.cached, totals.completion)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One catalogue model."""

    name: str
    model: str
    base_url: str | None
    #: The model endpoint's key ("not-needed" for endpoints that take none).
    api_key: str = field(repr=False)
    vision: bool
    context_tokens: int
    prices: Prices


@dataclass(frozen=True, slots=True)
class Persona:
    """A named system prompt, and the model it comes with (if any)."""

    name: str
    prompt: str
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Every model and persona; ``default`` names the default model."""

    models: Mapping[str, ModelSpec]
    personas: Mapping[str, Persona]
    default: str
    #: The file read (``None``: the single model of the OPENAI_* settings).
    path: Path | None = None

    def model(self, name: str | None) -> ModelSpec | None:
        """The model called ``name``, if the catalogue has it."""
        return self.models.get(name) if name else None

    @property
    def default_model(self) -> ModelSpec:
        return self.models[self.default]


@dataclass(frozen=True, slots=True)
class Defaults:
    """What a catalogue model leaves out comes from the OPENAI_* settings."""

    base_url: str | None
    api_key: str | None
    model: str
    context_tokens: int
    prices: Prices = Prices()
    #: Whether an endpoint needs no key (a local one); default: every endpoint needs one.
    keyless: Callable[[str | None], bool] = lambda _url: False


def single(defaults: Defaults) -> Catalogue:
    """The catalogue of a bot without MODELS_FILE: one model, named by its id."""
    spec = ModelSpec(
        name=defaults.model,
        model=defaults.model,
        base_url=defaults.base_url,
        api_key=defaults.api_key or "not-needed",
        vision=True,
        context_tokens=defaults.context_tokens,
        prices=defaults.prices,
    )
    return Catalogue({spec.name: spec}, {}, spec.name)


def load(path: Path, defaults: Defaults, env: Mapping[str, str] | None = None) -> Catalogue:
    """Read and check MODELS_FILE; :class:`CatalogueError` names what is wrong.

    ``env`` holds the variables ``api_key_env`` names (default: the environment);
    OPENAI_API_KEY comes from ``defaults`` (it may have been read from .env).
    """
    where = f"MODELS_FILE {path}"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogueError(f"{where}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{where}: is not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise CatalogueError(f"{where}: is not UTF-8 text") from None
    unknown = sorted(set(data) - {"models", "personas"})
    if unknown:
        raise CatalogueError(f"{where}: unknown table [{unknown[0]}] (only [models.<name>] "
                             "and [personas.<name>])")  # fmt: skip
    tables = data.get("models")
    if not isinstance(tables, dict) or not tables:
        raise CatalogueError(f"{where}: [models]: needs at least one [models.<name>] table")
    values = os.environ if env is None else env
    models: dict[str, ModelSpec] = {}
    defaults_named: list[str] = []
    for name, table in tables.items():
        spec, is_default = _model(where, name, table, defaults, env=values)
        models[name] = spec
        if is_default:
            defaults_named.append(name)
    if len(models) == 1 and not defaults_named:
        defaults_named = list(models)
    if len(defaults_named) != 1:
        found = ", ".join(defaults_named) or "none"
        raise CatalogueError(
            f"{where}: [models] default: exactly one model needs default = true (found: {found})"
        )
    personas = data.get("personas", {})
    if not isinstance(personas, dict):
        raise CatalogueError(f"{where}: [personas]: must be a table of [personas.<name>] tables")
    chosen = {name: _persona(where, name, table, models) for name, table in personas.items()}
    return Catalogue(models, chosen, defaults_named[0], path)


def _model(
    where: str, name: str, table: object, defaults: Defaults, *, env: Mapping[str, str]
) -> tuple[ModelSpec, bool]:
    at = f"{where}: [models.{name}]"
    if not _NAME.fullmatch(name):
        raise CatalogueError(f"{at}: the name must be 1 to 32 letters, digits, '_', '.' or '-'")
    if not isinstance(table, dict):
        raise CatalogueError(f"{at}: must be a table")
    _no_unknown(at, table, _MODEL_KEYS)
    model = _text(at, table, "model", required=True)
    assert model is not None
    base_url = _text(at, table, "base_url") or defaults.base_url
    if base_url is not None and urlsplit(base_url).scheme not in ("http", "https"):
        raise CatalogueError(f"{at} base_url: must be an http:// or https:// URL")
    key_env = _text(at, table, "api_key_env")
    if key_env is None or key_env == OPENAI_KEY_ENV:
        api_key = defaults.api_key
        if api_key is None and not defaults.keyless(base_url):
            raise CatalogueError(
                f"{at} api_key_env: {OPENAI_KEY_ENV} is not set and the endpoint "
                f"{base_url or 'OpenAI'} is remote"
            )
    elif not _ENV_NAME.fullmatch(key_env):
        raise CatalogueError(f"{at} api_key_env: must name an environment variable")
    else:
        api_key = env.get(key_env) or None
        if api_key is None:
            raise CatalogueError(f"{at} api_key_env: the variable {key_env} is not set")
    prices = Prices(
        _number(at, table, "price_input"),
        _number(at, table, "price_cached_input"),
        _number(at, table, "price_output"),
    )
    context = table.get("context_tokens", defaults.context_tokens)
    if isinstance(context, bool) or not isinstance(context, int) or context < 256:
        raise CatalogueError(f"{at} context_tokens: must be a whole number of at least 256")
    spec = ModelSpec(
        name=name,
        model=model,
        base_url=base_url,
        api_key=api_key or "not-needed",
        vision=_flag(at, table, "vision", default=True),
        context_tokens=context,
        prices=prices,
    )
    return spec, _flag(at, table, "default", default=False)


def _persona(where: str, name: str, table: object, models: Mapping[str, ModelSpec]) -> Persona:
    at = f"{where}: [personas.{name}]"
    if not _NAME.fullmatch(name):
        raise CatalogueError(f"{at}: the name must be 1 to 32 letters, digits, '_', '.' or '-'")
    if not isinstance(table, dict):
        raise CatalogueError(f"{at}: must be a table")
    _no_unknown(at, table, _PERSONA_KEYS)
    prompt, prompt_file = _text(at, table, "prompt"), _text(at, table, "prompt_file")
    if (prompt is None) == (prompt_file is None):
        raise CatalogueError(f"{at} prompt: give exactly one of prompt and prompt_file")
    if prompt_file is not None:
        try:
            prompt = Path(prompt_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CatalogueError(
                f"{at} prompt_file: cannot read {prompt_file} ({exc.strerror})"
            ) from None
    if not prompt:
        raise CatalogueError(f"{at} prompt: is empty")
    model = _text(at, table, "model")
    if model is not None and model not in models:
        raise CatalogueError(f"{at} model: names no [models.{model}] table")
    return Persona(name, prompt, model)


def _no_unknown(at: str, table: dict[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        known = ", ".join(sorted(allowed))
        raise CatalogueError(f"{at} {unknown[0]}: unknown key (allowed: {known})")


def _text(at: str, table: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = table.get(key)
    if value is None:
        if required:
            raise CatalogueError(f"{at} {key}: is missing")
        return None
    if not isinstance(value, str) or not value.strip():
        raise CatalogueError(f"{at} {key}: must be a non-empty string")
    return value.strip()


def _number(at: str, table: dict[str, Any], key: str) -> float:
    value = table.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CatalogueError(f"{at} {key}: must be a number of at least 0 (USD per million tokens)")
    return float(value)


def _flag(at: str, table: dict[str, Any], key: str, *, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise CatalogueError(f"{at} {key}: must be true or false")
    return value


class Models:
    """One client per catalogue model, made when first asked for."""

    def __init__(self, catalogue: Catalogue, *, timeout: float, max_retries: int) -> None:
        from .model.wire import WireCache  # noqa: PLC0415 - see the imports above

        self.catalogue = catalogue
        self._timeout, self._retries = timeout, max_retries
        self._clients: dict[str, ModelClient] = {}
        #: Shared by every client: a stored message's JSON does not depend on the model.
        self.wire = WireCache()

    def client(self, name: str) -> ModelClient:
        """The client of catalogue model ``name`` (it must be in the catalogue)."""
        found = self._clients.get(name)
        if found is None:
            from .model.client import ModelClient  # noqa: PLC0415 - see the imports above

            spec = self.catalogue.models[name]
            found = ModelClient(
                api_key=spec.api_key, base_url=spec.base_url, model=spec.model,
                timeout=self._timeout, max_retries=self._retries, wire=self.wire, name=name,
            )  # fmt: skip
            self._clients[name] = found
        return found

    @property
    def default(self) -> ModelClient:
        return self.client(self.catalogue.default)

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
