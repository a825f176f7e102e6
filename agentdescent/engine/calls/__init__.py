"""The calls: where work runs (executors: threads, processes, Ray), the units that travel to it,
stragglers, the evaluation cache, and the budget every call asks before it starts. Nothing is
imported here, so that a process running one unit (`units`) imports only what it needs.
"""
