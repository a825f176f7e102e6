"""Where AgentDescent keeps what is the user's own: `$AGENTDESCENT_HOME`, else `~/.agentdescent`.

Under it: `runs/` (the run store, `runs.store`), `backups/` (the record of the backups write-backs
made, `artifacts.registry`) and what host wiring installs. This module imports nothing of the
package, so that any layer can ask where home is.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "AGENTDESCENT_HOME"


def home() -> Path:
    """`$AGENTDESCENT_HOME`, else `~/.agentdescent`, absolute (read at each call, so that a test
    or a child process can point it elsewhere)."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".agentdescent").expanduser().absolute()
