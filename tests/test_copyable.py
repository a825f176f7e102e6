"""Why a backup copy failed, in words with the fix (`artifacts/copyable.py`)."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from agentdescent.artifacts.copyable import why_not_copied

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
