"""Telegram's text formatting as the fake checks it: HTML, MarkdownV2 and Markdown parsed
into entities, the entities Telegram adds itself, UTF-16 offsets, inline keyboards."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from .telegram_types import JSON, _ApiError, _Chat, _coerce_int, _EntityError

_BUTTON_ACTIONS: Final = frozenset(
    {
        "url",
        "callback_data",
        "web_app",
        "login_url",
        "switch_inline_query",
        "switch_inline_query_current_chat",
        "switch_inline_query_chosen_chat",
        "copy_text",
        "callback_game",
        "pay",
    }
)

_AUTO_COMMAND_RE: Final = re.compile(
    r"(?<!\S)/[A-Za-z0-9_]{1,64}(?:@[A-Za-z0-9_]{3,32})?(?=$|[\s.,;:!?)\]])"
)

_AUTO_MENTION_RE: Final = re.compile(r"(?<![\w@/])@[A-Za-z0-9_]{4,32}(?![\w@])")

_AUTO_URL_RE: Final = re.compile(r"(?<![\w@/.])(?:https?://|www\.)[^\s<>\"]+", re.IGNORECASE)

_URL_TRAILING: Final = ".,;:!?)]}'\""

_AUTO_SKIP_INSIDE: Final = frozenset({"code", "pre", "text_link", "text_mention", "custom_emoji"})

_WHITESPACE: Final = " \t\r\n"

_URL_SCHEMES: Final = frozenset({"http", "https", "ftp", "tg", "ton", "tonsite"})


def _u16(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's offsets and limits."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _byte_offset(text: str, index: int) -> int:
    return len(text[:index].encode("utf-8", "surrogatepass"))


def _entity(kind: str, offset: int, length: int, **extra: Any) -> JSON:
    return {"type": kind, "offset": offset, "length": length, **extra}


def _entity_sort_key(entity: JSON) -> tuple[int, int, str]:
    return (int(entity["offset"]), -int(entity["length"]), str(entity["type"]))


def _canonical_entities(entities: list[JSON]) -> list[str]:
    return sorted(json.dumps(entity, sort_keys=True) for entity in entities)


def _without_reply(raw: JSON) -> JSON:
    return {key: copy.deepcopy(value) for key, value in raw.items() if key != "reply_to_message"}


def _normalise_url(url: str) -> str | None:
    """Roughly Telegram's URL check: None when the link would be dropped."""
    url = url.strip()
    match = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*)://", url)
    if match:
        scheme = match.group(1).lower()
        rest = url[match.end() :]
    else:
        scheme, rest = "http", url
        if "." not in re.split(r"[/?#]", rest, maxsplit=1)[0]:
            return None
    if scheme not in _URL_SCHEMES or not rest:
        return None
    if scheme not in ("http", "https", "ftp"):
        return f"{scheme}://{rest}"
    host_end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
    host, tail = rest[:host_end], rest[host_end:]
    if not host:
        return None
    if not tail.startswith("/"):
        tail = "/" + tail
    return f"{scheme}://{host.lower()}{tail}"


def _strip_formatted(text: str, entities: list[JSON]) -> tuple[str, list[JSON]]:
    """Telegram trims leading and trailing whitespace and shifts the entities with it."""
    stripped = text.strip(_WHITESPACE)
    lead = len(text) - len(text.lstrip(_WHITESPACE))
    shift, total = _u16(text[:lead]), _u16(stripped)
    kept: list[JSON] = []
    for entity in entities:
        start = max(int(entity["offset"]) - shift, 0)
        end = min(int(entity["offset"]) + int(entity["length"]) - shift, total)
        if end > start:
            kept.append({**entity, "offset": start, "length": end - start})
    return stripped, kept


def _auto_entities(text: str, existing: list[JSON] | None = None) -> list[JSON]:
    """Entities Telegram detects by itself: bot commands, @mentions and URLs."""
    blocked = [
        (int(e["offset"]), int(e["offset"]) + int(e["length"]))
        for e in existing or []
        if e["type"] in _AUTO_SKIP_INSIDE
    ]
    found: list[JSON] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in (
        ("bot_command", _AUTO_COMMAND_RE),
        ("url", _AUTO_URL_RE),
        ("mention", _AUTO_MENTION_RE),
    ):
        for match in pattern.finditer(text):
            token = match.group()
            if kind == "url":
                token = token.rstrip(_URL_TRAILING)
            start = _u16(text[: match.start()])
            end = start + _u16(token)
            if any(start < hi and lo < end for lo, hi in blocked + taken):
                continue
            taken.append((start, end))
            found.append(_entity(kind, start, end - start))
    return sorted(found, key=_entity_sort_key)


class _Out:
    """The visible text being built, with its length in UTF-16 units."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.units = 0
        self.chars = 0

    def add(self, chunk: str) -> None:
        self.parts.append(chunk)
        self.units += _u16(chunk)
        self.chars += len(chunk)

    def text(self) -> str:
        return "".join(self.parts)


_HTML_SPACE: Final = frozenset(" \t\r\n\v\f")

_HTML_TAGS: Final = frozenset(
    {
        "a",
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "tg-emoji",
        "code",
        "pre",
        "blockquote",
    }
)

_HTML_SIMPLE: Final = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "span": "spoiler",
    "tg-spoiler": "spoiler",
}

_HTML_NAMED: Final = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}

_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _decode_html_entity(src: str, pos: int, *, strict: bool) -> tuple[str, int] | None:
    """Decode the character reference at ``src[pos] == "&"``: (char, next position) or None."""
    n = len(src)
    end = pos + 1
    if end < n and src[end] == "#":
        end += 1
        base, digits = 10, frozenset("0123456789")
        if end < n and src[end] == "x":
            base, digits, end = 16, _HEX_DIGITS, end + 1
        start = end
        while end < n and src[end] in digits:
            end += 1
        if end == start or end - start > 8:
            return None
        code = int(src[start:end], base)
        if code == 0 or code >= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return None
        char = chr(code)
    else:
        start = end
        while end < n and src[end].isascii() and src[end].isalpha():
            end += 1
        named = _HTML_NAMED.get(src[start:end])
        if named is None:
            return None
        char = named
    if end < n and src[end] == ";":
        return char, end + 1
    return None if strict else (char, end)


@dataclass
class _OpenTag:
    name: str
    argument: str
    offset: int  # UTF-16 offset in the visible text
    source_pos: int  # index in the source, for error messages


class _HtmlParser:
    """Telegram's (tdlib's) HTML parser, error messages included, plus the strict extras."""

    def __init__(self, src: str, *, strict: bool) -> None:
        self.src = src
        self.strict = strict
        self.pos = 0
        self.out = _Out()
        self.stack: list[_OpenTag] = []
        self.entities: list[JSON] = []
        self.code_language: dict[tuple[int, int], str] = {}

    def parse(self) -> tuple[str, list[JSON]]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "&":
                self._ampersand()
            elif ch != "<":
                self.out.add(ch)
                self.pos += 1
            elif src.startswith("</", self.pos):
                self._end_tag()
            else:
                self._start_tag()
        if self.stack:
            name = self.stack[-1].name
            raise _EntityError(f'Can\'t find end tag corresponding to start tag "{name}"')
        return self.out.text(), self.entities

    def _at(self, index: int) -> int:
        return _byte_offset(self.src, index)

    def _ampersand(self) -> None:
        decoded = _decode_html_entity(self.src, self.pos, strict=self.strict)
        if decoded is not None:
            char, self.pos = decoded
            self.out.add(char)
            return
        if self.strict:
            raise _EntityError(self._bad_ampersand(self.pos))
        self.out.add("&")
        self.pos += 1

    def _bad_ampersand(self, pos: int) -> str:
        token = re.match(r"&#?\w{0,12};?", self.src[pos:])
        shown = token.group() if token else "&"
        return (
            f'Unsupported HTML entity "{shown}" at byte offset {self._at(pos)}; '
            'a literal "&" must be written as "&amp;" (FakeTelegram strict mode)'
        )

    def _skip_spaces(self) -> None:
        while self.pos < len(self.src) and self.src[self.pos] in _HTML_SPACE:
            self.pos += 1

    def _start_tag(self) -> None:
        src, begin = self.src, self.pos
        end = begin + 1
        while end < len(src) and src[end] not in _HTML_SPACE and src[end] != ">":
            end += 1
        if end >= len(src):
            raise _EntityError(f"Unclosed start tag at byte offset {self._at(begin)}")
        name = src[begin + 1 : end].lower()
        if name not in _HTML_TAGS:
            raise _EntityError(f'Unsupported start tag "{name}" at byte offset {self._at(begin)}')
        self.pos = end
        attributes = self._attributes(name, begin)
        argument = self._tag_argument(name, attributes, begin)
        self.stack.append(_OpenTag(name, argument, self.out.units, begin))
        self.pos += 1  # the '>'

    def _attributes(self, name: str, begin: int) -> dict[str, str]:
        src = self.src
        attributes: dict[str, str] = {}
        unclosed = f'Unclosed start tag "{name}" at byte offset {self._at(begin)}'
        while True:
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            if src[self.pos] == ">":
                return attributes
            attr_begin = self.pos
            while (
                self.pos < len(src)
                and src[self.pos] not in _HTML_SPACE
                and (src[self.pos] not in "=>")
            ):
                self.pos += 1
            attribute = src[attr_begin : self.pos]
            if not attribute:
                raise _EntityError(
                    f'Empty attribute name in the tag "{name}" at byte offset {self._at(begin)}'
                )
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            if src[self.pos] != "=":
                attributes[attribute] = ""
                continue
            self.pos += 1
            self._skip_spaces()
            if self.pos >= len(src):
                raise _EntityError(unclosed)
            attributes[attribute] = self._attribute_value(begin)

    def _attribute_value(self, begin: int) -> str:
        src = self.src
        quote = src[self.pos]
        if quote not in "'\"":
            start = self.pos
            while self.pos < len(src) and (
                (src[self.pos].isascii() and src[self.pos].isalnum()) or src[self.pos] in ".-"
            ):
                self.pos += 1
            if self.pos >= len(src) or (src[self.pos] not in _HTML_SPACE and src[self.pos] != ">"):
                raise _EntityError(f"Unexpected end of name token at byte offset {self._at(start)}")
            return src[start : self.pos].lower()
        self.pos += 1
        value: list[str] = []
        while self.pos < len(src) and src[self.pos] != quote:
            if src[self.pos] == "&":
                decoded = _decode_html_entity(src, self.pos, strict=self.strict)
                if decoded is not None:
                    value.append(decoded[0])
                    self.pos = decoded[1]
                    continue
                if self.strict:
                    raise _EntityError(self._bad_ampersand(self.pos))
            value.append(src[self.pos])
            self.pos += 1
        if self.pos >= len(src):
            raise _EntityError(f"Unclosed start tag at byte offset {self._at(begin)}")
        self.pos += 1
        return "".join(value)

    def _tag_argument(self, name: str, attributes: dict[str, str], begin: int) -> str:
        if name == "a":
            href = attributes.get("href", "")
            if not href and self.strict:
                raise _EntityError(
                    f'Tag "a" must have a non-empty "href" attribute at byte offset '
                    f"{self._at(begin)} (FakeTelegram strict mode)"
                )
            return href
        if name == "code":
            css = attributes.get("class", "")
            return css.removeprefix("language-") if css.startswith("language-") else ""
        if name == "span":
            if attributes.get("class") != "tg-spoiler":
                raise _EntityError(
                    f'Tag "span" must have class "tg-spoiler" at byte offset {self._at(begin)}'
                )
            return "spoiler"
        if name == "tg-emoji":
            emoji_id = attributes.get("emoji-id", "")
            if not emoji_id.isdigit():
                raise _EntityError("Invalid custom emoji identifier specified")
            return emoji_id
        if name == "blockquote":
            return "expandable" if "expandable" in attributes else ""
        return ""

    def _end_tag(self) -> None:
        src, begin = self.src, self.pos
        if not self.stack:
            raise _EntityError(f"Unexpected end tag at byte offset {self._at(begin)}")
        end = begin + 2
        while end < len(src) and src[end] not in _HTML_SPACE and src[end] != ">":
            end += 1
        end_name = src[begin + 2 : end].lower()
        while end < len(src) and src[end] in _HTML_SPACE:
            end += 1
        if end >= len(src) or src[end] != ">":
            raise _EntityError(f"Unclosed end tag at byte offset {self._at(begin)}")
        tag = self.stack.pop()
        if end_name and end_name != tag.name:
            raise _EntityError(
                f"Unmatched end tag at byte offset {self._at(begin)}, "
                f'expected "</{tag.name}>", found "</{end_name}>"'
            )
        self.pos = end + 1
        self._close(tag)

    def _close(self, tag: _OpenTag) -> None:
        offset, length = tag.offset, self.out.units - tag.offset
        if length <= 0:
            return
        if tag.name in _HTML_SIMPLE:
            self.entities.append(_entity(_HTML_SIMPLE[tag.name], offset, length))
        elif tag.name == "a":
            url = _normalise_url(tag.argument) if tag.argument else None
            if url is not None:
                self.entities.append(_entity("text_link", offset, length, url=url))
        elif tag.name == "tg-emoji":
            self.entities.append(
                _entity("custom_emoji", offset, length, custom_emoji_id=tag.argument)
            )
        elif tag.name == "blockquote":
            kind = "expandable_blockquote" if tag.argument else "blockquote"
            self.entities.append(_entity(kind, offset, length))
        elif tag.name == "pre":
            self._close_pre(offset, length)
        else:
            self._close_code(offset, length, tag.argument)

    def _last_entity_is(self, kind: str, offset: int, length: int) -> bool:
        if not self.entities:
            return False
        last = self.entities[-1]
        return bool(last["type"] == kind and last["offset"] == offset and last["length"] == length)

    def _close_pre(self, offset: int, length: int) -> None:
        language = ""
        if self._last_entity_is("code", offset, length):  # <pre><code class=...>
            self.entities.pop()
            language = self.code_language.get((offset, length), "")
        pre = _entity("pre", offset, length)
        if language:
            pre["language"] = language
        self.entities.append(pre)

    def _close_code(self, offset: int, length: int, language: str) -> None:
        if self._last_entity_is("pre", offset, length):  # <code><pre>...</pre></code>
            if language:
                self.entities[-1]["language"] = language
            return
        self.code_language[(offset, length)] = language
        self.entities.append(_entity("code", offset, length))


def _pre_header(src: str, pos: int) -> tuple[str, int]:
    """After an opening ``` at ``pos``: the language (if any) and where the contents start."""
    lang_end = pos
    while lang_end < len(src) and src[lang_end] not in _HTML_SPACE and src[lang_end] != "`":
        lang_end += 1
    language = ""
    if pos != lang_end and lang_end < len(src) and src[lang_end] != "`":
        language, pos = src[pos:lang_end], lang_end
    if pos < len(src) and src[pos] in "\r\n":
        pair = src[pos : pos + 2]
        pos += 2 if len(pair) == 2 and pair[1] in "\r\n" and pair[0] != pair[1] else 1
    return language, pos


_MDV2_RESERVED: Final = frozenset("_*[]()~`>#+-=|{}.!")

_MDV2_OPENERS: Final = (
    ("__", "underline"),
    ("||", "spoiler"),
    ("![", "custom_emoji"),
    ("_", "italic"),
    ("*", "bold"),
    ("~", "strikethrough"),
    ("[", "text_link"),
    ("`", "code"),
)

_MDV2_CLOSERS: Final = {
    "bold": "*",
    "italic": "_",
    "code": "`",
    "pre": "```",
    "text_link": "]",
    "custom_emoji": "]",
    "underline": "__",
    "strikethrough": "~",
    "spoiler": "||",
}

_TD_TYPE_NAMES: Final = {
    "bold": "Bold",
    "italic": "Italic",
    "underline": "Underline",
    "strikethrough": "Strikethrough",
    "spoiler": "Spoiler",
    "code": "Code",
    "pre": "Pre",
    "text_link": "TextUrl",
    "custom_emoji": "CustomEmoji",
}


@dataclass
class _OpenMd:
    kind: str
    argument: str
    offset: int  # UTF-16 offset in the visible text
    char_start: int  # index in the visible text (for links that use their text as URL)
    source_pos: int


class _MarkdownV2Parser:
    """Telegram's MarkdownV2 parser (tdlib's algorithm and messages), with > block quotes."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.out = _Out()
        self.stack: list[_OpenMd] = []
        self.entities: list[JSON] = []
        self.quote_start: int | None = None

    def parse(self) -> tuple[str, list[JSON]]:
        while self.pos < len(self.src):
            self._step()
        self._close_quote(self.out.units)
        if self.stack:
            top = self.stack[-1]
            raise _EntityError(
                f"Can't find end of {_TD_TYPE_NAMES[top.kind]} entity at byte offset "
                f"{_byte_offset(self.src, top.source_pos)}"
            )
        return self.out.text(), self.entities

    def _step(self) -> None:
        src, pos = self.src, self.pos
        ch = src[pos]
        in_code = bool(self.stack) and self.stack[-1].kind in ("code", "pre")
        if not in_code and (pos == 0 or src[pos - 1] == "\n") and self._line_start(ch):
            return
        if ch == "\\" and pos + 1 < len(src) and 0 < ord(src[pos + 1]) <= 126:
            self.out.add(src[pos + 1])
            self.pos += 2
            return
        reserved = "`" if in_code else _MDV2_RESERVED
        if ch not in reserved:
            self.out.add(ch)
            self.pos += 1
        elif self.stack and self._is_end(ch):
            self._end_entity()
        else:
            self._begin_entity(ch)

    def _line_start(self, ch: str) -> bool:
        """Handle '>' block quotes at a line start; True when the character was consumed."""
        if ch == ">":
            if self.quote_start is None:
                self.quote_start = self.out.units
            self.pos += 1
            return True
        if self.pos > 0:
            self._close_quote(self.out.units - 1)  # the quote ends before the newline
        return False

    def _close_quote(self, end: int) -> None:
        if self.quote_start is not None and end > self.quote_start:
            self.entities.append(_entity("blockquote", self.quote_start, end - self.quote_start))
        self.quote_start = None

    def _is_end(self, ch: str) -> bool:
        kind = self.stack[-1].kind
        if kind == "italic":
            return ch == "_" and not self.src.startswith("__", self.pos)
        return self.src.startswith(_MDV2_CLOSERS[kind], self.pos)

    def _begin_entity(self, ch: str) -> None:
        begin = self.pos
        if self.src.startswith("```", begin):
            language, self.pos = _pre_header(self.src, begin + 3)
            self._push("pre", language, begin)
            return
        for opener, kind in _MDV2_OPENERS:
            if self.src.startswith(opener, begin):
                self.pos += len(opener)
                self._push(kind, "", begin)
                return
        raise _EntityError(
            f"Character '{ch}' is reserved and must be escaped with the preceding '\\'"
        )

    def _push(self, kind: str, argument: str, begin: int) -> None:
        self.stack.append(_OpenMd(kind, argument, self.out.units, self.out.chars, begin))

    def _end_entity(self) -> None:
        tag = self.stack.pop()
        extra: JSON = {}
        if tag.kind in ("text_link", "custom_emoji"):
            target = self._link_target(tag)
            if tag.kind == "custom_emoji":
                match = re.fullmatch(r"tg://emoji\?id=(\d+)", target)
                if match is None:
                    raise _EntityError("Custom emoji entity must contain a tg://emoji URL")
                extra["custom_emoji_id"] = match.group(1)
            else:
                url = _normalise_url(target)
                if url is None:
                    return
                extra["url"] = url
        else:
            self.pos += len(_MDV2_CLOSERS[tag.kind])
        if tag.kind == "pre" and tag.argument:
            extra["language"] = tag.argument
        length = self.out.units - tag.offset
        if length > 0:
            self.entities.append(_entity(tag.kind, tag.offset, length, **extra))

    def _link_target(self, tag: _OpenMd) -> str:
        src = self.src
        if not src.startswith("](", self.pos):
            self.pos += 1
            return self.out.text()[tag.char_start :]
        pos = url_begin = self.pos + 2
        url: list[str] = []
        while pos < len(src) and src[pos] != ")":
            if src[pos] == "\\" and pos + 1 < len(src) and 0 < ord(src[pos + 1]) <= 126:
                url.append(src[pos + 1])
                pos += 2
                continue
            url.append(src[pos])
            pos += 1
        if pos >= len(src):
            raise _EntityError(
                f"Can't find end of a URL at byte offset {_byte_offset(src, url_begin)}"
            )
        self.pos = pos + 1
        return "".join(url)


class _MarkdownParser:
    """Telegram's legacy Markdown parser (parse_mode="Markdown")."""

    def __init__(self, src: str) -> None:
        self.src = src
        self.pos = 0
        self.out = _Out()
        self.entities: list[JSON] = []

    def parse(self) -> tuple[str, list[JSON]]:
        src = self.src
        while self.pos < len(src):
            ch = src[self.pos]
            if ch == "\\" and src[self.pos + 1 : self.pos + 2] in ("_", "*", "`", "["):
                self.out.add(src[self.pos + 1])
                self.pos += 2
            elif ch in "_*`[":
                self._entity(ch)
            else:
                self.out.add(ch)
                self.pos += 1
        return self.out.text(), self.entities

    def _entity(self, ch: str) -> None:
        src, begin = self.src, self.pos
        end_char = "]" if ch == "[" else ch
        is_pre = ch == "`" and src.startswith("```", begin)
        language = ""
        if is_pre:
            language, self.pos = _pre_header(src, begin + 3)
        else:
            self.pos += 1
        start, start_char = self.out.units, self.out.chars
        while self.pos < len(src) and (
            src[self.pos] != end_char or (is_pre and not src.startswith("```", self.pos))
        ):
            self.out.add(src[self.pos])
            self.pos += 1
        if self.pos >= len(src):
            raise _EntityError(
                f"Can't find end of the entity starting at byte offset {_byte_offset(src, begin)}"
            )
        length = self.out.units - start
        if ch == "[":
            self._link(start, length, self.out.text()[start_char:])
            return
        self.pos += 3 if is_pre else 1
        if length <= 0:
            return
        if is_pre:
            entity = _entity("pre", start, length)
            if language:
                entity["language"] = language
            self.entities.append(entity)
        else:
            kind = {"_": "italic", "*": "bold", "`": "code"}[ch]
            self.entities.append(_entity(kind, start, length))

    def _link(self, start: int, length: int, inner: str) -> None:
        src = self.src
        url = inner
        if src.startswith("](", self.pos):
            close = src.find(")", self.pos + 2)
            close = len(src) if close < 0 else close
            url = src[self.pos + 2 : close]
            self.pos = close + 1
        else:
            self.pos += 1
        normalised = _normalise_url(url)
        if length > 0 and normalised is not None:
            self.entities.append(_entity("text_link", start, length, url=normalised))


def _explicit_entities(value: Any) -> list[JSON]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _ApiError(400, "Bad Request: can't parse entities JSON object")
    entities: list[JSON] = []
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("type"), str)
            and _coerce_int(item.get("offset")) is not None
            and _coerce_int(item.get("length")) is not None
        ):
            raise _ApiError(400, "Bad Request: can't parse MessageEntity JSON object")
        offset, length = _coerce_int(item["offset"]) or 0, _coerce_int(item["length"]) or 0
        if offset >= 0 and length > 0:
            entities.append({**item, "offset": offset, "length": length})
    return entities


def _reply_markup(params: JSON, chat: _Chat | None = None) -> JSON | None:
    """The message's keyboard, checked like Telegram's; ``web_app`` buttons only in a
    private ``chat`` (when given), with an https:// URL."""
    markup = params.get("reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise _ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
    keyboard = markup.get("inline_keyboard")
    if keyboard is None:
        return markup
    if not isinstance(keyboard, list) or not all(isinstance(row, list) for row in keyboard):
        raise _ApiError(400, 'Bad Request: field "inline_keyboard" must be an Array of Array')
    for row in keyboard:
        for button in row:
            _check_button(button)
            web_app = button.get("web_app")
            if web_app is not None and chat is not None and chat.type != "private":
                raise _ApiError(400, "Bad Request: BUTTON_TYPE_INVALID")
            if web_app is not None and not str(web_app.get("url", "")).startswith("https://"):
                raise _ApiError(400, "Bad Request: BUTTON_URL_INVALID")
    return markup


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise _ApiError(400, "Bad Request: can't parse inline keyboard button")
    if not _BUTTON_ACTIONS & button.keys():
        raise _ApiError(
            400,
            "Bad Request: can't parse inline keyboard button: "
            "Text buttons are unallowed in the inline keyboard",
        )
    data = button.get("callback_data")
    if data is not None and not 1 <= len(str(data).encode()) <= 64:
        raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


def _visible_markup(markup: JSON | None) -> JSON | None:
    """Only inline keyboards are part of the Message object Telegram returns."""
    if markup is not None and "inline_keyboard" in markup:
        return copy.deepcopy(markup)
    return None
