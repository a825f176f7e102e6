"""The child process that runs one page's python blocks for tests/docs_blocks.py, one interpreter a page.

Each request on stdin is one JSON line, {"code": path, "out": path, "env": {...}}: the block is
compiled from its file and run as `__main__` in a namespace of its own, with the environment
given (restored after), the working directory the page's, and file descriptors 1 and 2 sent to
`out` (so what child processes print is kept too). The answer is one JSON line on the original
stdout: {"ok": bool, "error": traceback or ""}. One interpreter for a page's blocks saves its
imports once instead of once a block; each block still starts from an empty namespace.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def run_block(request: dict) -> dict:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update(request["env"])
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with open(request["out"], "w", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            with open(request["code"], encoding="utf-8") as file:
                code = compile(file.read(), request["code"], "exec")
            exec(code, {"__name__": "__main__", "__file__": request["code"]})  # noqa: S102 - the page's own code
            answer = {"ok": True, "error": ""}
        except SystemExit as stop:
            answer = {"ok": stop.code in (0, None), "error": f"SystemExit({stop.code!r})"}
        except BaseException:  # noqa: BLE001 - whatever the block raised is its failure, reported
            answer = {"ok": False, "error": traceback.format_exc()}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
    os.chdir(saved_cwd)
    os.environ.clear()
    os.environ.update(saved_env)
    return answer


def main() -> None:
    sys.path[0] = ""  # as `python file.py` in the page's folder would see it: that folder first
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    for line in sys.stdin:
        answers.write(json.dumps(run_block(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
