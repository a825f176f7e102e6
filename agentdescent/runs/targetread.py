"""A folder target read for a run: its text files, its other files carried as they are, and,
when some cannot be read, the spec's way out named (the `exclude` globs that leave them out,
fewest first).

A file whose name says text (`TEXT_SUFFIXES`) that is not UTF-8 text is carried as it is, never
changed, like an image; `unsaved_text` names each with the encoding it looks saved in, for `plan`.
`bracket_hint` says how a glob names a file whose name holds a `[`, for a glob that matches none.

Left out: a text target (one file: `reading`), whether a backup can copy the folder
(`artifacts.copyable`), and what else a spec's target must be (`build`).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from agentdescent import reading
from agentdescent.artifacts import load_tree
from agentdescent.errors import UserError
from agentdescent.governance import matching
from agentdescent.quoting import first_of

SHOWN_GLOBS = 10  # exclude globs a refusal suggests, at most
TEXT_SUFFIXES = frozenset(".md .markdown .txt .rst .py .sh .bash .js .mjs .ts .json .jsonl .yaml .yml .toml .cfg .ini "
                          ".csv .tsv .html .xml .sql .rb .go .rs .java .c .h .cpp".split())  # names a text file has


def has_files(folder: str) -> bool:
    """Whether `folder` holds a file `load_tree` would read with nothing excluded (one is enough)."""
    other: dict[str, bytes] = {}
    return bool(load_tree(folder, binary=other, on_unreadable="skip", max_files=1) or other)


def read_folder(target: str, exclude: Sequence[str], assets: dict[str, bytes],
                executable: set[str] | None = None) -> dict[str, str]:
    """The folder target's text files (those `exclude` names left out), its others put in
    `assets`; `UserError` naming each file that cannot be read (a symlink, a file over the
    limits) and the spec's way to leave it out."""
    refused: list[tuple[str, str]] = []
    tree = load_tree(target, exclude=exclude, binary=assets, executable=executable, on_unreadable="skip", skipped=refused)
    if not refused:
        return tree
    past = [(path, why) for path, why in refused if why.startswith("it is past max_")]
    if past:  # the folder is too big as a whole: the files past the cut are no more to blame than the rest
        bulk = _bulk(target, [*tree, *assets, *(path for path, _ in refused)], [path for path, _ in past],
                     by_bytes="bytes" in past[0][1])
        limit = past[0][1].removeprefix("it is past ")
        way = (f"leave out what the run does not need with exclude: [{', '.join(json.dumps(g) for g in bulk)}] in the "
               "spec" if bulk else "point target at a smaller folder, or list what to leave out in exclude:")
        raise UserError(f"holds more than a run reads ({limit}): {way}, then plan again")
    named = "; ".join(f"{json.dumps(path)}: {why}" for path, why in refused[:3]) + (f"; and {len(refused) - 3} more"
                                                                        if len(refused) > 3 else "")
    every = _globs([path for path, _ in refused], kept=[*tree, *assets])
    globs = ", ".join(json.dumps(glob) for glob in every[:SHOWN_GLOBS]) + (", ..." if len(every) > SHOWN_GLOBS else "")
    them = "it" if len(refused) == 1 else "them"
    raise UserError(f"cannot read {len(refused)} of its files: leave {them} out of the run with exclude: [{globs}] in "
                    f"the spec, or fix {them} ({named})")  # the way out first: a problem's message is cut to a length


def unsaved_text(assets: Mapping[str, bytes], shown: int = 3) -> list[str]:
    """The files of `assets` whose name says text, each with what it looks saved as; one line
    naming the first `shown` of them and the fix, or none."""
    found = [f"{path} ({why})" for path, data in sorted(assets.items())
             if Path(path).suffix.lower() in TEXT_SUFFIXES and (why := reading.not_text(data)) is not None]
    if not found:
        return []
    more = f" and {len(found) - shown} more" if len(found) > shown else ""
    return [f"{'; '.join(found[:shown])}{more}: not UTF-8 text, so carried as they are and never changed by the run; "
            "save them as UTF-8 for the run to change them"]


def _bulk(root: str, paths: list[str], past: list[str], *, by_bytes: bool) -> list[str]:
    """The fewest globs, largest first, whose files outweigh those of `past` (by count, or by
    bytes): each a top folder ("data/*"), or a kind of top-level file ("*.csv"). None that would
    leave out SKILL.md; [] when no such globs are enough."""
    weight = (lambda path: _size(Path(root) / path)) if by_bytes else (lambda path: 1)  # noqa: E731
    groups: Counter[str] = Counter()
    for path in paths:
        top, _, rest = path.partition("/")
        groups[f"{literal_glob(top)}/*" if rest else f"*{literal_glob(Path(path).suffix)}" if Path(path).suffix else
               literal_glob(path)] += weight(path)
    needed, chosen = sum(weight(path) for path in past), []
    for glob, held in groups.most_common():
        if needed <= 0:
            break
        if not fnmatch.fnmatchcase("SKILL.md", glob):
            chosen.append(glob)
            needed -= held
    return chosen if needed <= 0 else []


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def literal_glob(text: str) -> str:
    """`text` as a glob that matches only itself, but for a byte of a name that is not UTF-8 (held
    as a lone surrogate, which no spec can hold): `?`, any one character.
    literal_glob("a[1]*.md") == "a[[]1][*].md";  literal_glob("caf\\udce9.md") == "caf?.md" """
    return re.sub(r"[\udc80-\udcff]", "?", re.sub(r"([*?[])", r"[\1]", text))


def bracket_hint(glob: str, files: Iterable[str]) -> str:
    """How to write `glob` when it is the name of one of `files` spelt as it is, which matches no
    file when it holds a `[` (a character class); "" when it is not.
    bracket_hint("hooks/[pre].sh", ["hooks/[pre].sh"]) == "`[` starts a character class in a glob: to name
    the file hooks/[pre].sh, write 'hooks/[[]pre].sh'" """
    if "[" not in glob or glob not in files:
        return ""
    return f"`[` starts a character class in a glob: to name the file {glob}, write {literal_glob(glob)!r}"


def unmatched_editable(editable: Sequence[str], files: Collection[str], target: str, shown: int = 5) -> list[str]:
    """The warning for the globs of `editable` that match none of `files` (the first `shown` named,
    the rest counted: a spec may name many places a change could add files), or none."""
    hints = {i: bracket_hint(glob, files) for i, glob in enumerate(editable) if not any(matching(path, [glob]) for path in files)}
    if not hints:
        return []
    unmatched = [f"editable[{i}] {editable[i]!r}" + (f" ({hint})" if hint else "") for i, hint in hints.items()]
    one, typo = len(hints) == 1, "" if all(hints.values()) else " (a typo?)"
    return [f"{first_of(unmatched, shown, '; ')} match{'es' if one else ''} no file of {target}{typo}: "
            f"{'it lets' if one else 'each lets'} a change add files there, and no more"]


def _globs(paths: list[str], kept: Iterable[str] = ()) -> list[str]:
    """Globs that name `paths` and none of `kept`, most first: a top folder holding several, and
    nothing kept, as "folder/*", the others literally.
    _globs(["a/x", "a/y", "b[1].md"]) == ["a/*", "b[[]1].md"]"""
    held = {path.split("/")[0] for path in kept if "/" in path}
    folders = Counter(top for path in paths if "/" in path and (top := path.split("/")[0]) not in held)
    shared = [f"{literal_glob(folder)}/*" for folder, count in folders.most_common() if count > 1]
    return shared + [literal_glob(p) for p in paths if "/" not in p or folders[p.split("/")[0]] < 2]
