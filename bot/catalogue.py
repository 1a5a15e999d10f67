"""The model catalogue (MODELS_FILE): the models users pick from, their endpoints and
prices, and the named personas.

The file is TOML::

    [models.fast]                 # the name users see and pick
    model = "gpt-4o-mini"         # the id sent to the endpoint
    base_url = "https://api.openai.com/v1"   # optional, default OPENAI_BASE_URL
    api_key_env = "OPENAI_API_KEY"           # optional: the variable holding the key
    vision = true                 # optional (default true)
    tools = true                  # optional (default true): offered tools (web search, MCP)
    context_tokens = 32000        # optional, default CONTEXT_TOKEN_BUDGET
    price_input = 0.15            # optional: USD per million prompt tokens
    price_cached_input = 0.075    # optional
    price_output = 0.60           # optional
    default = true                # exactly one model is the default

    [models.voice]
    kind = "tts"                  # optional: "chat" (default), "tts" or "image"
    model = "gpt-4o-mini-tts"
    price_per_1m_chars = 15.0     # optional (tts): USD per million characters read

    [models.painter]
    kind = "image"
    model = "gpt-image-1"
    price_per_image = 0.04        # optional (image): USD per picture

    [personas.coder]
    prompt_file = "config/personas/coder.txt"   # or: prompt = "You are ..."
    model = "fast"                # optional: the persona's model

Without a file the catalogue is one model built from OPENAI_BASE_URL, OPENAI_API_KEY,
OPENAI_MODEL and the PRICE_* settings, named by its model id, so a bot set up with
those alone behaves as it always did.

Speech and image models (``kind = "tts"`` / ``"image"``) are kept apart from the chat
models users pick (:attr:`Catalogue.media_models`); TTS_MODEL and IMAGE_MODEL name the
one of each kind the bot uses (:func:`choose_media`), or, without a file, a model id on
the OPENAI_* endpoint. A bad file is one :class:`CatalogueError` line
naming the file, the table and the key; a key's value is never part of it.

:class:`Models` holds one client per catalogue model (they share one wire cache: a
stored message encodes the same for every model).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the settings check reads the file before the client's imports load
    from .model.client import ModelClient
    from .model.images import ImageMaker
    from .model.speech import Speaker

#: The kinds of choice a node may carry (bot/turn/branch.py): a model, a persona.
MODEL, PERSONA = "m", "p"
#: A name users pick (and the bot keeps in Redis records and button data): short, and
#: free of the separators those use.
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_KEYS = frozenset(
    {
        "model", "base_url", "api_key_env", "vision", "context_tokens", "price_input",
        "price_cached_input", "price_output", "default", "kind", "price_per_1m_chars",
        "price_per_image", "tools",
    }
)  # fmt: skip
#: What a model does: chat (the models users pick), speech (text to speech), pictures.
Kind = Literal["chat", "tts", "image"]
KINDS: tuple[Kind, ...] = ("chat", "tts", "image")
#: The keys only a model of one kind may have.
_KIND_KEYS: dict[str, Kind] = {
    "vision": "chat", "tools": "chat", "context_tokens": "chat", "price_input": "chat",
    "price_cached_input": "chat", "price_output": "chat", "default": "chat",
    "price_per_1m_chars": "tts", "price_per_image": "image",
}  # fmt: skip
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
    """USD per million tokens (a speech model: per million characters read; an image
    model: per picture); all zero means no price table. What a speech or image call
    costs: :mod:`bot.usage.costs`."""

    input: float = 0.0
    cached_input: float = 0.0
    output: float = 0.0
    per_1m_chars: float = 0.0
    per_image: float = 0.0

    @property
    def configured(self) -> bool:
        return bool(
            self.input or self.cached_input or self.output or self.per_1m_chars or self.per_image
        )

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
    kind: Kind = "chat"
    #: Offered tools (the built-in ones and MCP_CONFIG's); false for a model that
    #: cannot call them (many local ones): its requests carry none.
    tools: bool = True


@dataclass(frozen=True, slots=True)
class Persona:
    """A named system prompt, and the model it comes with (if any)."""

    name: str
    prompt: str
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Catalogue:
    """Every model and persona; ``default`` names the default model."""

    #: The chat models (the ones users pick), by name.
    models: Mapping[str, ModelSpec]
    personas: Mapping[str, Persona]
    default: str
    #: The file read (``None``: the single model of the OPENAI_* settings).
    path: Path | None = None
    #: The speech and image models of the file (``kind = "tts"`` / ``"image"``), by name.
    media_models: Mapping[str, ModelSpec] = field(default_factory=dict)
    #: The speech model the bot reads answers aloud with (TTS_MODEL); None: off.
    speech: ModelSpec | None = None
    #: The image model the bot makes and edits pictures with (IMAGE_MODEL); None: off.
    images: ModelSpec | None = None

    def model(self, name: str | None) -> ModelSpec | None:
        """The model called ``name``, if the catalogue has it."""
        return self.models.get(name) if name else None

    @property
    def default_model(self) -> ModelSpec:
        return self.models[self.default]

    @property
    def prices(self) -> dict[str, Prices]:
        """The prices of every model the bot calls, by name: the chat models, and the
        speech and image models in use (accounting's ``model_prices``)."""
        found = {name: spec.prices for name, spec in self.models.items()}
        for spec in (self.speech, self.images):
            if spec is not None:
                found[spec.name] = spec.prices
        return found


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
    media: dict[str, ModelSpec] = {}
    defaults_named: list[str] = []
    for name, table in tables.items():
        spec, is_default = _model(where, name, table, defaults, env=values)
        (models if spec.kind == "chat" else media)[name] = spec
        if is_default:
            defaults_named.append(name)
    if not models:
        raise CatalogueError(f'{where}: [models]: needs at least one chat model (kind = "chat")')
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
    return Catalogue(models, chosen, defaults_named[0], path, media_models=media)


def choose_media(
    catalogue: Catalogue, defaults: Defaults, *, tts: str | None, image: str | None
) -> Catalogue:
    """``catalogue`` with its speech model (TTS_MODEL) and image model (IMAGE_MODEL):
    with a file each names a model of that kind there; without one, a model id on the
    OPENAI_* endpoint (without prices). :class:`CatalogueError` names what is wrong."""
    chosen: dict[str, ModelSpec | None] = {}
    wanted: tuple[tuple[Kind, str | None, str], ...] = (
        ("tts", tts, "TTS_MODEL"), ("image", image, "IMAGE_MODEL"),
    )  # fmt: skip
    for kind, name, setting in wanted:
        if name is None:
            chosen[kind] = None
        elif catalogue.path is None:
            chosen[kind] = ModelSpec(
                name=name, model=name, base_url=defaults.base_url,
                api_key=defaults.api_key or "not-needed", vision=False,
                context_tokens=defaults.context_tokens, prices=Prices(), kind=kind,
            )  # fmt: skip
        else:
            spec = catalogue.media_models.get(name)
            if spec is None or spec.kind != kind:
                names = ", ".join(n for n, s in catalogue.media_models.items() if s.kind == kind)
                raise CatalogueError(
                    f"{setting} is invalid: {name} is no [models.<name>] table of kind = "
                    f'"{kind}" in MODELS_FILE {catalogue.path} ({names or "it has none"})'
                )
            chosen[kind] = spec
    return replace(catalogue, speech=chosen["tts"], images=chosen["image"])


def _model(
    where: str, name: str, table: object, defaults: Defaults, *, env: Mapping[str, str]
) -> tuple[ModelSpec, bool]:
    at = f"{where}: [models.{name}]"
    if not _NAME.fullmatch(name):
        raise CatalogueError(f"{at}: the name must be 1 to 32 letters, digits, '_', '.' or '-'")
    if not isinstance(table, dict):
        raise CatalogueError(f"{at}: must be a table")
    _no_unknown(at, table, _MODEL_KEYS)
    kind = _kind(at, table)
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
        _number(at, table, "price_per_1m_chars", "USD per million characters"),
        _number(at, table, "price_per_image", "USD per picture"),
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
        kind=kind,
        tools=_flag(at, table, "tools", default=True),
    )
    return spec, _flag(at, table, "default", default=False)


def _kind(at: str, table: dict[str, Any]) -> Kind:
    """The model's ``kind``, checked against the keys it has."""
    kind = table.get("kind", "chat")
    if kind not in KINDS:
        raise CatalogueError(f'{at} kind: must be "chat", "tts" or "image"')
    for key in sorted(table):
        owner = _KIND_KEYS.get(key)
        if owner is not None and owner != kind:
            raise CatalogueError(f'{at} {key}: only a model of kind = "{owner}" has it')
    return cast(Kind, kind)


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
        raise CatalogueError(f"{at} model: names no [models.{model}] table of a chat model")
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


def _number(
    at: str, table: dict[str, Any], key: str, unit: str = "USD per million tokens"
) -> float:
    value = table.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise CatalogueError(f"{at} {key}: must be a number of at least 0 ({unit})")
    return float(value)


def _flag(at: str, table: dict[str, Any], key: str, *, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise CatalogueError(f"{at} {key}: must be true or false")
    return value


class Models:
    """One client per catalogue model, made when first asked for."""

    def __init__(
        self, catalogue: Catalogue, *, timeout: float, max_retries: int, voice: str = "alloy"
    ) -> None:
        """``voice``: the speech model's (TTS_VOICE)."""
        from .model.wire import WireCache  # noqa: PLC0415 - see the imports above

        self.catalogue = catalogue
        self._timeout, self._retries = timeout, max_retries
        self._clients: dict[str, ModelClient] = {}
        #: Shared by every client: a stored message's JSON does not depend on the model.
        self.wire = WireCache()
        self.voice = voice
        self._speaker: Speaker | None = None
        self._image_maker: ImageMaker | None = None

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

    def speaker(self) -> Speaker | None:
        """The client of the speech model (TTS_MODEL), in the voice given (TTS_VOICE);
        None when speech is off."""
        spec = self.catalogue.speech
        if spec is None:
            return None
        if self._speaker is None:
            from .model.speech import Speaker  # noqa: PLC0415 - see the imports above

            self._speaker = Speaker(
                api_key=spec.api_key, base_url=spec.base_url, model=spec.model, voice=self.voice,
                timeout=self._timeout, max_retries=self._retries, name=spec.name,
            )  # fmt: skip
        return self._speaker

    def image_maker(self) -> ImageMaker | None:
        """The client of the image model (IMAGE_MODEL); None when pictures are off."""
        spec = self.catalogue.images
        if spec is None:
            return None
        if self._image_maker is None:
            from .model.images import ImageMaker  # noqa: PLC0415 - see the imports above

            self._image_maker = ImageMaker(
                api_key=spec.api_key, base_url=spec.base_url, model=spec.model,
                timeout=self._timeout, max_retries=self._retries, name=spec.name,
            )  # fmt: skip
        return self._image_maker

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        for other in (self._speaker, self._image_maker):
            if other is not None:
                await other.close()
