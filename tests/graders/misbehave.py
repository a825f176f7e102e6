#!/usr/bin/env python3
"""A grader that fails in the way GRADER_MODE names: garbage, exit3, too_big, hang, json, meta, echo."""
import json
import os
import sys
import time

payload = json.load(sys.stdin)
mode = os.environ.get("GRADER_MODE", "")
if mode == "garbage":
    print("the answer looks fine to me")
elif mode == "echo":  # what the model wrote, back on stdout: it may forge our words
    print(f"model said: {payload['output']}")
elif mode == "exit3":
    print("grader crashed: no rubric file", file=sys.stderr)
    sys.exit(3)
elif mode == "too_big":
    print(1.7)
elif mode == "hang":
    time.sleep(30)
elif mode == "json":
    print(json.dumps({"reward": 0.25, "why": "partly right"}))
elif mode == "meta":  # the reward the task's meta asks for: proves meta and prompt arrive intact
    print(payload["task"]["meta"]["want"] if payload["task"]["prompt"] == "héllo {x}" else 0)
else:
    sys.exit(f"unknown GRADER_MODE {mode!r}")
