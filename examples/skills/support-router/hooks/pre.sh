#!/bin/sh
# Runs before the skill; part of the evaluation harness, never changed by a diff.
exit 0
