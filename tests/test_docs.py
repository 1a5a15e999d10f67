"""The documentation holds together: README.md and docs/*.md.

Every relative link resolves to a file, and a ``#anchor`` to a heading of that file
(GitHub's slugs); every setting the code knows is in the one settings reference,
``docs/settings.md``, which names no setting the code does not know; the README stays
within two screens and keeps the two commands. Files only: no network, no servers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.settings import Settings
from bot.settings_help import SETTINGS_HELP

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The one table of every setting.
SETTINGS_REFERENCE = DOCS / "settings.md"
README_MAX_LINES = 120

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
#: ``[text](target)`` or ``[text](target "title")``; images too (their file must exist).
_INLINE_LINK = re.compile(
    r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]"  # the text, which may hold one level of brackets
    r"\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"  # (target "title")
)
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_SETTING = re.compile(r"`([A-Z][A-Z0-9_]+)`")


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> Iterator[str]:
    """The lines of *text* outside fenced code blocks."""
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            yield line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading (before numbering repeats): its text, lower
    case, without punctuation (letters, digits, ``_``, ``-`` and spaces stay), spaces
    as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = _CODE_SPAN.sub(lambda m: m.group(2), text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of *path*'s headings; a repeated slug gets ``-1``, ``-2`` …"""
    seen: Counter[str] = Counter()
    found = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def link_targets(path: Path) -> Iterator[str]:
    """Every link target in *path*'s prose (code blocks and code spans excluded)."""
    for line in prose_lines(path.read_text(encoding="utf-8")):
        reference = _REFERENCE_LINK.match(line)
        if reference:
            yield reference.group(1)
            continue
        prose = _CODE_SPAN.sub("", line)
        yield from (m.group(1) for m in _INLINE_LINK.finditer(prose))


def broken_links(path: Path) -> list[str]:
    """The relative links of *path* that lead nowhere, each as ``file: target (why)``."""
    problems = []
    for target in link_targets(path):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: … are not checked (no network)
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            problems.append(f"{path.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{path.name}: {target} (no such heading in {linked.name})")
    return problems


def reference_settings(path: Path = SETTINGS_REFERENCE) -> set[str]:
    """The setting names in the first cell of *path*'s table rows."""
    names: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        if line.startswith("| `"):
            names.update(_SETTING.findall(line.split("|")[1]))
    return names


def code_settings() -> set[str]:
    """Every setting the code knows: the Settings fields and ``--help``'s list."""
    return {name.upper() for name in Settings.model_fields} | set(SETTINGS_HELP)


# --- the documents ------------------------------------------------------------------


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_every_setting_is_in_the_reference_and_no_other() -> None:
    documented = reference_settings()
    assert code_settings() - documented == set(), "missing from docs/settings.md"
    assert documented - code_settings() == set(), "in docs/settings.md, unknown to the code"


def test_readme_fits_two_screens_and_keeps_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "make run" in text
    assert "make test" in text


def test_the_readme_links_every_document() -> None:
    linked = {
        (README.parent / target.partition("#")[0]).resolve()
        for target in link_targets(README)
        if not re.match(r"[a-z]+:", target)
    }
    assert set(doc_files()[1:]) - linked == set()


# --- the checker itself -------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("How threads work (30 seconds)", "how-threads-work-30-seconds"),
        ("A local model (Ollama, vLLM, llama.cpp)", "a-local-model-ollama-vllm-llamacpp"),
        ("Tools (MCP servers)", "tools-mcp-servers"),
        ("`make` targets & more", "make-targets--more"),
        ("See [scaling](scaling.md) now", "see-scaling-now"),
        ("snake_case stays", "snake_case-stays"),
    ],
)
def test_slugs_follow_github(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Part\n\n## Part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#part-1) [self](#page) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#part-2)\n"
        "`[in code](nowhere.md)`\n\n"
        "```\n[in a block](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#part-2 (no such heading in other.md)",
    ]


def test_the_reference_reader_sees_only_first_cells(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text(
        "| name | meaning |\n|---|---|\n"
        "| `A_ONE` / `A_TWO` | unlike `NOT_A_NAME` |\n"
        "```\n| `IN_CODE` | x |\n```\n",
        encoding="utf-8",
    )
    assert reference_settings(page) == {"A_ONE", "A_TWO"}
