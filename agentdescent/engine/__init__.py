"""The loop: `evolve()`, its rounds and barrier, the worker turn, evaluation, and executors.

Nothing is imported here: `evolve` lives in `agentdescent.engine.evolve` (and is exported by
`agentdescent`), so that a process running one unit of work (`units`) imports only what it needs.
"""
