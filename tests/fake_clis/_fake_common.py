"""What the stand-in `claude` and `codex` executables share: logging what they saw, and the
failure modes that do not depend on the CLI's output format.

Environment variables (set by the tests):
    FAKE_CLI_MODE       ok (default) or a failure mode; each fake lists the modes it knows; "old"
                        is a version whose help does not list the flag that saves no session
    FAKE_CLI_LOG        append one JSON line per run: {"program", "argv", "cwd", "stdin", "env"}
    FAKE_CLI_SHOW_ENV   comma-separated variable names whose values go into the log's "env"
    FAKE_CLI_PIDS       in "hang" mode, write {"fake": pid, "child": pid of its `sleep`} here; in
                        "leave_child" and "hang_leaving_child" the `sleep` is in a session of its own
    FAKE_CLI_ECHO_ENV   in "echo_env" mode, the variable whose value is printed to stderr

The fakes start as `python3 -S` (their shebang): they need only the standard library, and the
site packages' start-up (the editable install's import finder) was half of each start, ~25 ms.
"""

import os
import select
import sys
import time


def mode():
    return os.environ.get("FAKE_CLI_MODE", "ok")


def log(program, argv, stdin):
    """Append what this run saw to $FAKE_CLI_LOG, if set."""
    path = os.environ.get("FAKE_CLI_LOG")
    if not path:
        return
    import json  # here, not at the top: see dumps

    shown = [name for name in os.environ.get("FAKE_CLI_SHOW_ENV", "").split(",") if name]
    entry = {"program": program, "argv": argv, "cwd": os.getcwd(), "stdin": stdin,
             "env": {name: os.environ.get(name) for name in shown}}
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(entry) + "\n")


def dumps(value):
    """`json.dumps(value)` for the records the fakes print (dicts, lists, text, numbers), without
    importing json: its `re` and `enum` cost each start of a fake ~20 ms, and the documentation's
    quickstart starts one per rollout. The same text json.dumps gives (ASCII, ", " and ": ")."""
    from _json import encode_basestring_ascii as text

    if isinstance(value, dict):
        return "{" + ", ".join(f"{text(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    if isinstance(value, str):
        return text(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


def answer_help(argv, asked, flag):
    """Print a help listing `flag` and exit when `argv` asks for help (`asked`), or a version for
    --version; an "old" CLI's help does not list the flag, and a "help_hangs" one never answers. Not
    logged: neither is a call of an agent."""
    if argv == asked and mode() == "help_hangs":  # noted beside the log, then never answered
        with open(os.environ["FAKE_CLI_LOG"] + ".help", "a", encoding="utf-8") as noted:
            noted.write("asked\n")
        time.sleep(120)
    if argv == asked:
        print(f"Usage: fake [options]\n  {flag if mode() != 'old' else ''}  (the flag a call saves no session with)")
        sys.exit(0)
    if argv == ["--version"]:  # what doctor and plan ask
        print("0.0.1 (a stand-in)")
        sys.exit(0)


def read_stdin():
    """Stdin's content, or None if it is left open with nothing to read (the real CLI would wait)."""
    ready, _, _ = select.select([sys.stdin], [], [], 0.5)
    return sys.stdin.read() if ready else None


def refuse(program, problem):
    """Exit 2 with a usage message, as a real CLI does on bad arguments."""
    print(f"{program} (fake): {problem}", file=sys.stderr)
    sys.exit(2)


def skill_note():
    """The content of ./SKILL.md, to prove the agent ran in the workspace."""
    try:
        with open("SKILL.md", encoding="utf-8") as file:
            return f"\nSKILL.md says: {file.read().strip()}"
    except FileNotFoundError:
        return "\n(no SKILL.md here)"


def common_modes(program):
    """Handle the modes that are the same for every CLI; return normally for the others."""
    current = mode()
    if current == "nonzero":
        for number in range(1, 31):
            print(f"{program} diagnostic line {number}", file=sys.stderr)
        sys.exit(3)
    if current == "hang":
        import json  # here, not at the top: every other run of a fake starts faster without them
        import subprocess
        import time

        child = subprocess.Popen(["sleep", "60"])
        with open(os.environ["FAKE_CLI_PIDS"], "w", encoding="utf-8") as file:
            json.dump({"fake": os.getpid(), "child": child.pid}, file)
        print(f"{program}: thinking very hard", file=sys.stderr, flush=True)
        time.sleep(60)
        sys.exit(0)
    if current in ("leave_child", "hang_leaving_child"):  # as a shell tool's `cmd &` in a session of its own
        import json
        import subprocess
        import time

        child = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.environ["FAKE_CLI_PIDS"], "w", encoding="utf-8") as file:
            json.dump({"fake": os.getpid(), "child": child.pid}, file)
        if current == "hang_leaving_child":
            time.sleep(60)
        return
    if current == "echo_env":
        name = os.environ["FAKE_CLI_ECHO_ENV"]
        print(f"{program}: auth failed for key {os.environ.get(name)}", file=sys.stderr)
        sys.exit(1)
    if current == "garbage":
        print("<html>502 Bad Gateway</html> this is not JSON")
        sys.exit(0)
