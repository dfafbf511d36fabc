"""The documentation's links and the README's shape, checked without a broker.

Every relative link in README.md, docs/*.md and bench/README.md must name a file or directory
of the repository, and every ``#anchor`` into a Markdown file a heading of that file (GitHub's
rule for the heading's id). The README stays a front door: at most 300 lines, and its Layout
names every package and module at the top of processor/ and every top-level directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's id for a heading: its text without markup, lowercased, punctuation dropped
    (but hyphens and underscores), each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The ids of a Markdown file's headings; a repeated one gets -1, -2... as on GitHub."""
    seen: dict[str, int] = {}
    ids = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(page: Path) -> list[tuple[int, str]]:
    """The targets of a page's links and images outside code, with their line numbers."""
    found = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            found.append((number, match.group(1)))
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``page`` that names no file of ``root``, or no heading of its
    Markdown file."""
    broken = []
    for number, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = f"{page.relative_to(root)}:{number}: {target}"
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(root):
            broken.append(f"{where}: outside the repository")
        elif not file.exists():
            broken.append(f"{where}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{where}: no heading with this id in {file.relative_to(root)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_a_heading(page: Path) -> None:
    assert links(page) or page.name != "README.md", "no links found: the parser is wrong"
    assert broken_links(page) == []


def test_the_slug_rule() -> None:
    assert slug("Faults, and what happens") == "faults-and-what-happens"
    assert slug("Sinks: keys, values, headers and partitions") == (
        "sinks-keys-values-headers-and-partitions"
    )
    assert slug('emit="record"') == "emitrecord"
    assert slug("`bench/run.py`: the side_by_side run") == "benchrunpy-the-side_by_side-run"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing heading and a way out are reported; code
    is not read for links."""
    (tmp_path / "README.md").write_text("# Title\n\n## Layout\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "probe.md"
    page.write_text(
        "# Probe\n\n[a](#probe) [b](#nothing) [c](missing.md) [d](../README.md#layout)\n"
        "![e](../README.md#title) [f](../../outside.md) [g](../docs/)\n"
        "`[h](in-inline-code.md)`\n```\n[i](in-a-code-block.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path) == [
        "docs/probe.md:3: #nothing: no heading with this id in docs/probe.md",
        "docs/probe.md:3: missing.md: no such file",
        "docs/probe.md:4: ../../outside.md: outside the repository",
    ]


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/"


def test_the_readme_layout_names_every_part_of_the_tree() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text[text.index("## Layout") :]
    layout = layout[: layout.find("\n## ", 1)] if "\n## " in layout[1:] else layout
    package = ROOT / "processor"
    names = [
        f"{entry.name}/" if entry.is_dir() else entry.name
        for entry in package.iterdir()
        if (entry.is_dir() and (entry / "__init__.py").exists())
        or (entry.suffix == ".py" and entry.name != "__init__.py")
    ]
    names += ["bench/", "tests/", "deploy/", "docs/", "examples/", ".ci/"]
    missing = [name for name in sorted(names) if name not in layout]
    assert missing == [], f"README's Layout does not name {missing}"
