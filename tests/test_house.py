"""The house for its next readers: the README is a short front page, the docs it lists exist, links between the
docs resolve, no file speaks of how the project was built step by step, and tests share code only through
tests/helpers/ (never one test module imported by another).

A figure says what produced it (date, host, command, log), never which development step it came from, so no file's
name or text may hold the word "stop" or "stops" followed by a number (with a space, an underscore, a hyphen or
nothing between). Code has one legitimate neighbour, the draft-stop threshold, written as a decimal (the draft-stop
flag followed by 0.4); the pattern leaves a number with a decimal point alone, and its word boundary on the left
leaves ``draft_stop`` written as an identifier alone too."""
import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP_WORDS = re.compile(r"\bstops?[ _-]?\d+\b(?!\.\d)", re.IGNORECASE)
README_MAX_LINES = 220
OWN_DOCS = ["README.md", "CONTRIBUTING.md", "assets/models/README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def repository_files() -> list[Path]:
    """Tracked files, and new ones git does not ignore (so a file is checked before its first commit)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the file list comes from git ls-files")
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file (a NUL byte in its first 8 KiB, or not UTF-8)."""
    with path.open("rb") as f:
        if b"\0" in f.read(8192):
            return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def test_the_pattern_catches_step_words_and_spares_the_draft_stop():
    w = "stop"  # the examples are assembled, so that this file passes its own scan
    for said in (f"{w} 27", f"{w}s 25-26", f"{w.title()}29", f"{w}-27 note", f"({w} 24)", f"{w.upper()}S 3"):
        assert STEP_WORDS.search(said), said
    for fine in ("draft_stop=0.4", "--draft-stop 0.4", "stop 0.4", "a stop below 0.4", "nonstop 5", "stopped at 24"):
        assert not STEP_WORDS.search(fine), fine


@pytest.mark.slow
def test_no_file_names_a_development_step():
    hits = []
    for path in repository_files():
        name = str(path.relative_to(ROOT))
        if STEP_WORDS.search(name):
            hits.append(f"{name}: its name")
        text = text_of(path)
        for i, line in enumerate(text.splitlines() if text else (), 1):
            if m := STEP_WORDS.search(line):
                hits.append(f"{name}:{i}: {m.group(0)!r}")
    assert not hits, "say the date, host and command instead of the step:\n" + "\n".join(hits[:40])


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"


def test_every_doc_in_the_readme_table_exists():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("\n## Docs", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    linked = [LINK.search(row).group(1) for row in rows]
    assert len(linked) >= 8, f"the README's docs table lists {len(linked)} docs"
    missing = [doc for doc in linked if not (ROOT / doc).is_file()]
    assert not missing, f"the README's docs table lists missing files: {missing}"
    listed = {doc for doc in linked if doc.startswith("docs/")}
    unlisted = sorted({f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} - listed)
    assert not unlisted, f"docs not in the README's table: {unlisted}"


@pytest.mark.parametrize("doc", OWN_DOCS)
def test_relative_links_resolve(doc):
    path = ROOT / doc
    broken = []
    text = re.sub(r"<!--.*?-->", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)  # commented out: not a link
    for target in LINK.findall(text):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        if not (path.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{doc} links to missing files: {broken}"


def test_every_image_in_docs_is_shown_by_a_doc():
    texts = "\n".join((ROOT / doc).read_text(encoding="utf-8") for doc in OWN_DOCS)
    images = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*")
                    if p.suffix.lower() in (".png", ".gif", ".jpg", ".jpeg", ".svg", ".webp"))
    unshown = [image for image in images if image.split("/")[-1] not in texts]
    assert not unshown, f"images in docs/ that no doc shows (link them or delete them): {unshown}"


NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
           "eleven": 11, "twelve": 12}


def _counted(text: str, noun: str) -> list[int]:
    """Every count the text gives of ``noun`` ("eight ready runs", "9 lessons")."""
    pattern = rf"\b(\d+|{'|'.join(NUMBERS)})\s+(?:[\w-]+\s+)?{noun}\b"
    return [int(n) if n.isdigit() else NUMBERS[n.lower()] for n in re.findall(pattern, text, flags=re.IGNORECASE)]


def test_the_readmes_counts_match_the_code():
    from specviz.labs import gallery

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lessons = len(list((ROOT / "assets" / "lessons").glob("*.json")))
    assert _counted(text, "lessons") and set(_counted(text, "lessons")) == {lessons}
    runs = len(gallery.entries())
    assert _counted(text, "ready runs") and set(_counted(text, "ready runs")) == {runs}
    demo = (ROOT / "specviz" / "app" / "demo.py").read_text(encoding="utf-8")
    labs = demo.split('gr.Tab("Labs"', 1)[1].split('gr.Tab("Compare', 1)[0].count("gr.Tab(")
    for count in _counted(text, "labs"):
        assert count == labs, f"the README counts {count} labs; the app has {labs}"


def imported_test_modules(source: str, module: str) -> list[str]:
    """The modules under tests/ that ``source`` (the text of the module named ``module``, as "tests.app.test_x")
    imports besides ``tests.helpers`` and what is below it: other test modules and conftest, whose fixtures are
    shared through pytest, never by import. A relative import is resolved against ``module``'s package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            package = ".".join(module.split(".")[: -node.level] + [node.module or ""]).strip(".") if node.level \
                else node.module
            whole = node.module is None or package == "tests"  # "from tests import conftest": the names are modules
            names = [f"{package}.{alias.name}" for alias in node.names] if whole else [package]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if (parts[0] == "tests" and parts[1:2] != ["helpers"]) or parts[0] == "conftest" or parts[0].startswith("test_"):
                found.append(name)
    return found


def test_the_import_check_catches_a_test_module_and_spares_helpers():
    caught = {"from tests.engines.test_wild_reading import WILD": ["tests.engines.test_wild_reading"],
              "import tests.conftest": ["tests.conftest"], "from tests import conftest": ["tests.conftest"],
              "from .test_wild_reading import WILD": ["tests.engines.test_wild_reading"],
              "from . import test_wild_reading": ["tests.engines.test_wild_reading"],
              "from ..conftest import prompt": ["tests.conftest"], "import test_decoder": ["test_decoder"],
              "def f():\n    from tests.trees.test_tree import SHAPES": ["tests.trees.test_tree"]}
    for source, want in caught.items():
        assert imported_test_modules(source, "tests.engines.test_x") == want, source
    spared = ("from tests.helpers.wild import WILD", "from tests.helpers import models", "import tests.helpers.clock",
              "from ..helpers.models import tiny_llama", "from specviz.trees import tree", "import pytest")
    for source in spared:
        assert imported_test_modules(source, "tests.engines.test_x") == [], source


@pytest.mark.slow
def test_no_test_module_imports_another():
    """Tests share code through tests/helpers/ and fixtures through tests/conftest.py: a test module imported by
    another runs that module's top-level code (its models built at import) and ties two files' edits together."""
    hits = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        hits += [f"{path.relative_to(ROOT)}: {name}" for name in imported_test_modules(path.read_text(encoding="utf-8"),
                                                                                        module)]
    assert not hits, "move what is shared into tests/helpers/:\n" + "\n".join(hits)
