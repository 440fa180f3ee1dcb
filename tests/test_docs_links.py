"""Every relative link in README.md and docs/*.md points to a file that exists, and an anchor to a heading there
(issue 30: the README's reference material moved into docs/, and links between the pages must survive moves)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where a link is a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    for m in re.finditer(r"^#{1,6} (.+)$", text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_is_githubs():
    assert slug("`[jobs.watchdogs.*]`: what every watchdog has") == "jobswatchdogs-what-every-watchdog-has"
    assert slug("Back to training in about a second (instant recovery)") == \
        "back-to-training-in-about-a-second-instant-recovery"


def test_every_relative_link_resolves():
    broken = []
    for page in pages():
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no heading with that anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_stays_short_and_maps_every_docs_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250, "the README is for a newcomer: reference material goes to docs/"
    unmapped = [p.name for p in (REPO / "docs").glob("*.md") if f"](docs/{p.name})" not in readme]
    assert not unmapped, f"docs pages the README's map does not link: {unmapped}"
