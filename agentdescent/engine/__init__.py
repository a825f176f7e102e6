"""The engine: `evolve()` (wiring only), the loop (`loop/`), the calls (`calls/`) and persistence
(`persist/`).

Nothing is imported here: `evolve` lives in `agentdescent.engine.evolve` (and is exported by
`agentdescent`), so that a process running one unit of work (`calls.units`) imports only what it needs,
and the CLI reads where `evolve` keeps a ledger without importing the engine.
"""

TEMPORARY_LEDGER_PREFIX = "agentdescent-ledger-"  # a run without store= keeps its ledger in such a temp folder
