"""A git repository opened at its path as written, its git commands run with no hook.

GitPython expands `$NAME` in a path: in the one given to `git.Repo` (unless told not to) and, always,
in the working folder of the git commands it runs, the repository's own included. A store under a
folder whose name holds a `$` would then be read and written somewhere else. Here both take the
path as it is. Left out: making a repository (the ledger's `_create_aside`) and what is in it.
"""

from __future__ import annotations

import os
import pathlib

import git

# The ledger's git runs no hook: a global core.hooksPath would run on every ref update it makes.
NO_HOOKS = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": os.devnull}


class _LiteralGit(git.Git):
    """`git.Git` in a working folder taken as written: GitPython expands a `str` one, never a `Path`."""

    def __init__(self, working_dir: str | os.PathLike | None = None) -> None:
        super().__init__(None if working_dir is None else pathlib.Path(working_dir))


class _LiteralRepo(git.Repo):
    GitCommandWrapperType = _LiteralGit


def repository(path: pathlib.Path) -> git.Repo:
    """The repository at `path`, as written, its git commands run with no hook. A path given,
    GitPython points its git at it, whatever GIT_DIR says."""
    repo = _LiteralRepo(path, expand_vars=False)
    repo.git.update_environment(**NO_HOOKS)
    return repo
