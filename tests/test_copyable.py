"""Why a backup copy failed, in words with the fix (`artifacts/copyable.py`)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from agentdescent.artifacts.copyable import copy_problems, why_not_copied

FULL = Path("/dev/full")  # every write to it fails as on a full disk (ENOSPC)


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
def test_a_disk_that_fills_while_the_backup_is_copied_asks_for_space(tmp_path):
    """A disk that filled while accept copied its backup said 'make them readable, or move them
    out' (a folder's copy) or 'make the folder beside it writable' (a file's)."""
    target = tmp_path / "skill"
    target.mkdir()
    (target / "SKILL.md").write_text("# a skill\n", encoding="utf-8")
    with pytest.raises(OSError) as one_file:
        shutil.copy2(target / "SKILL.md", FULL)
    with pytest.raises(shutil.Error) as folder:
        shutil.copytree(target, tmp_path / "copy", copy_function=lambda source, _: shutil.copy2(source, FULL))
    assert one_file.value.errno == errno.ENOSPC
    for failed in (one_file.value, folder.value):
        said = why_not_copied(target, failed)
        assert said.startswith(os.strerror(errno.ENOSPC)) and f"free some space beside the target (in {tmp_path})" in said
        assert "readable" not in said and "writable" not in said


def test_an_entry_that_cannot_be_read_is_still_named_with_its_fix(tmp_path):
    denied = shutil.Error([(str(tmp_path / "skill" / "secret.md"), str(tmp_path / "copy"),
                            f"[Errno 13] Permission denied: '{tmp_path / 'skill' / 'secret.md'}'")])
    said = why_not_copied(tmp_path / "skill", denied)
    assert said == "1 of its entries cannot be copied (secret.md: Permission denied); make them readable, or move " \
                   "them out, and try again"



def a_skill_this_deep(folder: Path, length: int) -> tuple[Path, Path]:
    """A skill under folders of 200-byte names in `folder` and its file refs/<f...>.md, whose
    absolute path is `length` bytes (a key may hold at most 1,024, so the depth is the skill's)."""
    parent = folder
    while length - len(os.fsencode(parent)) > 300:
        parent = parent / ("d" * 200)
    target = parent / "skill"
    (target / "refs").mkdir(parents=True)
    (target / "SKILL.md").write_text("hi\n", encoding="utf-8")
    leaf = target / "refs" / ("f" * (length - len(os.fsencode(target / "refs")) - 4) + ".md")
    leaf.write_text("deep\n", encoding="utf-8")
    assert len(os.fsencode(leaf)) == length
    return target, leaf


def test_a_file_whose_backup_copy_would_pass_path_max_is_named_with_the_real_fix(tmp_path):
    """load_tree read a file 4,090 bytes deep and plan passed it; after the run, accept could not
    copy it into .skill.bak-1/skill/... ("File name too long") and said to make it readable."""
    from agentdescent import load_tree
    from agentdescent.artifacts import backups
    from agentdescent.errors import UserError
    from agentdescent.reading import PATH_MAX

    target, leaf = a_skill_this_deep(tmp_path / "deep", PATH_MAX - 6)
    assert len(load_tree(target)) == 2  # the run reads it
    [problem] = copy_problems(target)
    assert "bytes in a backup" in problem and "the system takes at most 4,095" in problem
    assert "shorten the names of the folders on its way, or move skill to a folder with a shorter path" in problem
    with pytest.raises(UserError, match="bytes in a backup") as refused:
        backups.take(target, made_by="write_to", paths=["SKILL.md"])
    assert "readable" not in str(refused.value) and not [p for p in target.parent.iterdir() if ".bak-" in p.name]
    fits, _ = a_skill_this_deep(tmp_path / "fits", PATH_MAX - 60)  # its copy's path is short enough
    assert copy_problems(fits) == []
    backups.take(fits, made_by="write_to", paths=["SKILL.md"])
