#!/usr/bin/env python3
"""A well-behaved grader: 1 when the gold appears in the output (case-insensitive), else 0.

It checks the payload's shape strictly, so a change to what the scorer sends fails the tests.
"""
import json
import sys

payload = json.load(sys.stdin)
assert set(payload) == {"task", "output"}, payload
assert set(payload["task"]) == {"id", "prompt", "gold", "meta"}, payload["task"]
gold, output = payload["task"]["gold"], payload["output"]
print(f"grading task {payload['task']['id']}")  # chatter before the grade is allowed
print(1.0 if gold.lower() in output.lower() else 0.0)
print()
