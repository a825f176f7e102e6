"""The loop: `evolve()`, its rounds and barrier, the worker turn, evaluation, and executors."""

from agentdescent.engine.evolve import evolve, split_tasks

__all__ = ["evolve", "split_tasks"]
