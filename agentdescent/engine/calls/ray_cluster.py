"""Ray itself, for the Ray executor: importing it, reaching a cluster, and what may travel to one.

`connect` joins the cluster `RAY_ADDRESS` names (read by `ray.init`), or starts a local one. What
goes wrong there is Ray's, not the run's, and is said as a `UserError` naming the fix: a local
cluster whose socket paths under the temporary folder pass the 107 bytes a Unix socket's path may
have (a long `TMPDIR`), a port or a folder Ray cannot have, or a cluster that cannot be reached
(Ray ends the process with `sys.exit` when it gives up on one). Left out: the actors
(`ray_executor`).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from agentdescent.errors import UserError

INSTALL = 'executor="ray" needs Ray: pip install "agentdescent[ray]"'


def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL) from None
    return ray


def connect(ray: Any) -> bool:
    """Join the cluster `RAY_ADDRESS` names, or start a local one, where this process has none yet;
    True when this call started one (its caller shuts it down)."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    local = {} if address else {"num_cpus": os.cpu_count() or 1}
    try:
        ray.init(include_dashboard=False, log_to_driver=False, **local)
    except (OSError, SystemExit) as exc:
        ray.shutdown()
        raise UserError(_unreached(exc, address)) from None
    except BaseException:  # Ctrl-C while the cluster starts: what it started so far goes too
        ray.shutdown()
        raise
    return True


def _unreached(exc: OSError | SystemExit, address: str | None) -> str:
    said = str(exc) if isinstance(exc, OSError) else f"Ray gave up with exit code {exc.code}"
    if address:
        return (f"executor='ray' could not join the Ray cluster RAY_ADDRESS={address!r} names ({said}); check that it "
                "runs there (ray status), or unset RAY_ADDRESS to start a local cluster")
    if "AF_UNIX path" in said:
        folder = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
        return (f"executor='ray' could not start a local Ray cluster: Ray keeps its sockets under {folder}, and their "
                "paths there are longer than the 107 bytes a Unix socket's path may have; set RAY_TMPDIR to a short "
                "folder (export RAY_TMPDIR=/tmp) and run again")
    return (f"executor='ray' could not start a local Ray cluster ({said}); start one yourself (ray start --head) and "
            "set RAY_ADDRESS, or use executor='process'")


def check_serializable(**callables: object) -> None:
    """Raise a `UserError` naming the first of `callables` that Ray cannot send to its workers."""
    ray = ray_module()
    for name, fn in callables.items():
        try:
            ray.cloudpickle.dumps(fn)
        except Exception as exc:
            raise UserError(f"executor='ray' sends {name} to Ray's workers, and it cannot be serialized "
                            f"({type(exc).__name__}: {exc}); a callable holding a lock, a thread or an open "
                            f"client cannot travel: create those inside it, or use executor='thread'") from None
