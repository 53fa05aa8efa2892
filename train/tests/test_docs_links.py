"""The documentation's links resolve: every relative ``[text](target)`` in README.md and docs/**/*.md names a file
or directory that exists, and a ``#anchor`` names a heading of the target page (GitHub's heading slugs). And the
repository cites only itself: no tracked text file points to an issue or work-session number or to a document that
is not in the repository (it states the fact, or links a page of docs/).

Standard library and git only (no torch, no yaml): it runs with any Python that has pytest."""

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target); target without spaces or in <...>, optionally followed by a "title"
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\(\s*(?P<target><[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
EXTERNAL = re.compile(r"^(https?:|mailto:)", re.IGNORECASE)


def markdown_files():
    return [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))


def current_pages():
    """The pages that describe the repository as it is: markdown_files() less the dated benchmark records of
    docs/benchmarks/ (each tells what ran at its commit, in that commit's names); that folder's index is kept."""
    return [p for p in markdown_files()
            if p.parent != REPO / "docs" / "benchmarks" or p.name == "README.md"]


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def github_slug(heading):
    """GitHub's anchor for a heading: its text (inline code's content kept, markup dropped) lowercased, every
    character that is not a letter, mark, digit, connector punctuation ('_'), space or '-' removed, spaces -> '-'."""
    text = INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    kept = [ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"]
    return "".join(kept).replace(" ", "-")


def anchors(path):
    """Every heading anchor of a Markdown file, with GitHub's -1, -2, ... suffixes for repeated slugs."""
    seen = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    # explicit HTML anchors (<a name="x"> / id="x") count too
    text = path.read_text(encoding="utf-8")
    found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", text))
    return found


def links(path):
    """(line number, target) of every Markdown link outside code (fences and inline code spans)."""
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            yield number, match.group("target").strip("<>")


def broken_links(path):
    """One message per link of ``path`` whose file or heading does not exist."""
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        where = f"{path.relative_to(REPO)}:{number}: ({target})"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{where}: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest} does not exist")
            continue
        if anchor:
            if dest.is_dir() or dest.suffix.lower() != ".md":
                problems.append(f"{where}: #{anchor} on {file_part}, which is not a Markdown file")
            elif anchor not in anchors(dest):
                problems.append(f"{where}: {dest.relative_to(REPO)} has no heading whose anchor is #{anchor}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    problems = broken_links(path)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail into a docs/ page and link it from "
        "the README's Documents list")


@pytest.mark.parametrize("heading, slug", [
    ("CUDA × torch: which torch a `cuda_version` gets", "cuda--torch-which-torch-a-cuda_version-gets"),
    ("Checking the cluster: `playbooks/check.yml`", "checking-the-cluster-playbookscheckyml"),
    ("Checkpoints, resume, re-attach", "checkpoints-resume-re-attach"),
    ("train.yml's steps → roles", "trainymls-steps--roles"),
    ("Größe und Ölung", "größe-und-ölung"),
])
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    """The checker itself: a missing file and a missing heading are both reported."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Real heading\n")
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#real-heading) [gone](docs/nope.md) [bad](docs/a.md#no-such)\n"
                    "`[code](not/a/link.md)`\n```\n[fenced](not/a/link.md)\n```\n[web](https://example.com/x#y)\n")
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "docs/nope.md does not exist" in problems[0] and "#no-such" in problems[1]


# Citations of what is not in the repository. Written so that this file does not match them itself.
OUTSIDE_REFERENCES = re.compile(
    r"\bissues? #?\d+|\bsessions? \d+\b|\(#\d+\)"  # an issue / work-session number, a bare "(#N)"
    r"|(?<![\w/.-])(?:shared|seeds)[/]"  # a relative path into a folder outside the repository (not /shared/home)
    r"|\b(?:DESIGN|NOTES)[.]md\b",  # design notes kept outside the repository
    re.IGNORECASE)


def tracked_text_files(root):
    """Every file git tracks under ``root`` that reads as UTF-8 text, less the benchmark records' JSON."""
    names = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in names.decode().split("\0"):
        if not name or re.fullmatch(r"docs/benchmarks/[^/]*\.json", name):
            continue
        path = root / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary, a submodule, or deleted in the working tree
        yield name, text


def outside_references(root):
    """'path:line: match' for every citation of an issue, a session or an outside document."""
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for name, text in tracked_text_files(root) for m in OUTSIDE_REFERENCES.finditer(text)]


def test_no_issue_numbers_or_outside_documents_are_cited():
    found = outside_references(REPO)
    assert not found, ("state the fact instead (or point to docs/developers/architecture.md or docs/benchmarks/):\n"
                       + "\n".join(found))


def test_an_outside_reference_is_found(tmp_path):
    """The checker itself, on a repository of its own: each kind is found, a look-alike that is not one is not."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    bad = ["see issue " + "12", "(#" + "13)", "Session" + " 15 measured it", "in shared" + "/notes.txt",
           "DESIGN" + ".md", "NOTES" + ".md", "seeds" + "/post.md", "issue" + " 16 item 7"]
    good = ['HF_HOME="/shared' + '/home/admin/hf"', 'scope="session"', "pytorch/pytorch#178665", "issue the calls"]
    (tmp_path / "a.py").write_text("\n".join(bad) + "\n")
    (tmp_path / "docs" / "b.md").write_text("\n".join(good) + "\n")
    (tmp_path / "docs" / "benchmarks" / "c.json").write_text('"' + "session" + ' 13"\n')
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    found = outside_references(tmp_path)
    assert [line.split(":")[0:2] for line in found] == [["a.py", str(n)] for n in range(1, len(bad) + 1)], found


# A repository path in a page's text (prose, code spans and blocks): a top-level folder of the repository, then
# path characters. A placeholder (`<role>`, `*`, `{x}`) ends the path: its folder part is checked then.
REPO_PATH = re.compile(r"(?<![\w./~$<>@-])((?:roles|playbooks|templates|molecule|docs|inventory|\.config|\.ci|"
                       r"train(?=/(?:common|controller|data|node|rank|tools|presets|tests)\b|/\w+\.py\b|/[\s`)]))"
                       r"/[\w./-]*)")
# paths a page tells the reader to make (not in the repository)
USER_PATHS = ("inventory/mycluster",)
# a dotted word that is a file name (train.log, job.json), not a module's name
FILE_SUFFIXES = {"py", "yml", "yaml", "json", "jsonl", "log", "md", "txt", "sh", "png", "j2", "ini", "env", "csv"}
# `train.<package>.<module>[.<name>]`, and `<module>.<name>` in a code span where <module> is a module of train/
TRAIN_NAME = re.compile(r"(?<![\w./])(train(?:\.\w+)+)")
SHORT_NAME = re.compile(r"^(\w+)\.(\w+)(?:\(.*\))?$")


def train_modules():
    """Dotted name -> path of every module and package of train/."""
    return {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (REPO / "train").rglob("*.py") if "__pycache__" not in p.parts}


def defined_names(path):
    """The names a module defines at its top level (functions, classes, assignments, imports)."""
    import ast

    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def missing_names(path, root=None):
    """One message per repository path or train module (or a module's name) that ``path`` names and that does not
    exist. ``root``: the repository to check against (the checker's own test gives another)."""
    root = root or REPO
    mods = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in (root / "train").rglob("*.py")}
    by_basename = {}
    for name, p in mods.items():
        by_basename.setdefault(name.rsplit(".", 1)[-1], []).append(p)
    text = path.read_text(encoding="utf-8")
    problems = []

    def where(m):
        return f"{path.relative_to(root)}:{text.count(chr(10), 0, m.start()) + 1}"

    for m in REPO_PATH.finditer(text):
        found = m.group(1).rstrip(".,:;")
        if text[m.end():m.end() + 1] in ("<", "*", "{") or ".." in found:
            found = found[:found.rfind("/") + 1] if ".." not in found else found.split("..")[0].rsplit("/", 1)[0]
        if found and not found.startswith(USER_PATHS) and not (root / found).exists():
            problems.append(f"{where(m)}: {found} does not exist")
    for m in TRAIN_NAME.finditer(text):
        parts = m.group(1).rstrip(".").split(".")
        if parts[-1] in FILE_SUFFIXES:  # a file name (train.log), not a module
            continue
        known = max((i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in mods), default=0)
        if known < 2:
            problems.append(f"{where(m)}: no module {'.'.join(parts[:3])} in train/")
        elif known < len(parts) and parts[known] not in defined_names(mods[".".join(parts[:known])]):
            package = mods[".".join(parts[:known])].name == "__init__.py"
            problems.append(f"{where(m)}: " + (f"no module {'.'.join(parts[:known + 1])} in train/" if package
                                               else f"{'.'.join(parts[:known])} has no {parts[known]}"))
    for m in INLINE_CODE.finditer(text):
        short = SHORT_NAME.match(m.group(2).strip())
        if short and short.group(1) in by_basename and short.group(2) not in FILE_SUFFIXES and not any(
                short.group(2) in defined_names(p) for p in by_basename[short.group(1)]):
            problems.append(f"{where(m)}: no module {short.group(1)} of train/ defines {short.group(2)}")
    return problems


@pytest.mark.parametrize("path", current_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_repository_path_and_train_module_named_exists(path):
    """A page that names a file, a folder or a train.* module (and a name in it) that is not there sends a reader
    nowhere; a renamed module or a moved file fails here, not in a reader's hands."""
    problems = missing_names(path)
    assert not problems, "named in the docs but not in the repository:\n" + "\n".join(problems)


def test_a_missing_path_or_module_is_found(tmp_path):
    """The checker itself, on a repository of its own: each kind of missing name is found, what exists is not."""
    (tmp_path / "train" / "rank").mkdir(parents=True)
    (tmp_path / "train" / "__init__.py").write_text("")
    (tmp_path / "train" / "rank" / "__init__.py").write_text("")
    (tmp_path / "train" / "rank" / "patches.py").write_text("def mix_in():\n    pass\nLIMIT = 3\n")
    (tmp_path / "roles" / "a" / "tasks").mkdir(parents=True)
    page = tmp_path / "README.md"
    page.write_text("roles/a/tasks/ and `roles/a/tasks/<step>.yml` and train.rank.patches.mix_in, `patches.LIMIT`\n"
                    "roles/b/tasks/main.yml\n`molecule/base.yml`\ntrain.rank." + "runtime\ntrain.rank.patches.gone\n"
                    "`patches.gone()`\n")
    problems = missing_names(page, tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "roles/b/tasks/main.yml does not exist", "molecule/base.yml does not exist", "no module train.rank." + "runtime in train/",
        "train.rank.patches has no gone", "no module patches of train/ defines gone"], problems
    assert [p.split(":")[1] for p in problems] == ["2", "3", "4", "5", "6"]


def test_the_layout_names_every_module_of_train():
    """architecture.md's Layout lists each package of train/ on lines of its own (``  <package>/  ...``, and the
    lines under it): every module file of the package is named there, and every file named there exists."""
    page = (REPO / "docs" / "developers" / "architecture.md").read_text(encoding="utf-8")
    block = page[page.index("\n## Layout\n"):]
    block = block[block.index("```"):block.index("```", block.index("```") + 3)]
    named, package = {}, None
    for line in block.splitlines():
        head = re.match(r"^  (\w+)/\s", line)
        if head:
            package = head.group(1)
        elif not line.startswith("   ") or not line.strip():
            package = None
        if package:
            named.setdefault(package, set()).update(re.findall(r"\b(\w+)\.py\b", line))
    assert {"common", "controller", "data", "node", "rank", "tools"} <= set(named), sorted(named)
    for package, names in named.items():
        files = {p.stem for p in (REPO / "train" / package).glob("*.py")} - {"__init__"}
        assert files - names == set(), f"architecture.md's Layout does not name train/{package}/: {sorted(files - names)}"
        assert names - files == set(), f"architecture.md's Layout names what train/{package}/ lacks: {sorted(names - files)}"


def test_the_layout_links_every_role():
    """architecture.md's table of the roles links every folder of roles/ (and only those)."""
    page = (REPO / "docs" / "developers" / "architecture.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(\.\./\.\./roles/(\w+)/\)", page[page.index("\n## Layout\n"):]))
    roles = {p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}
    assert roles - linked == set(), f"architecture.md's Layout does not link roles {sorted(roles - linked)}"
    assert len(linked) >= 10
