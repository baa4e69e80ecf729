"""The documents' links into each other: every `[text](FILE#anchor)` of README.md and docs/*.md names a file that
exists and a heading it has (GitHub's anchors: the heading lower-cased, punctuation but `-` and `_` dropped,
spaces as `-`, `-1`, `-2` ... for repeats). A heading renamed without its links breaks this."""
import re
from pathlib import Path

import pytest

from .helpers import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    found, seen = set(), {}
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code  # a `# comment` in a shell block is no heading
            continue
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match and not in_code:
            anchor = github_anchor(match.group(1))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def test_the_anchor_rule_on_headings_of_these_documents():
    assert (github_anchor("Structure-aware decoders: BiTran, PARENT, GCN (Choshen & Abend)") ==
            "structure-aware-decoders-bitran-parent-gcn-choshen--abend")
    assert (github_anchor("The `cpu` profile campaign: 1,600 updates, 3 seeds") ==
            "the-cpu-profile-campaign-1600-updates-3-seeds")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_link_to_a_heading_finds_it(document):
    broken = []
    for target, anchor in LINK.findall(document.read_text(encoding="utf-8")):
        linked = (document.parent / target) if target else document
        if not linked.is_file():
            broken.append(f"{target}#{anchor}: no such file")
        elif anchor not in anchors(linked):
            broken.append(f"{target or document.name}#{anchor}: no such heading")
    assert not broken, broken
