"""The loop: rounds and their barrier, the worker turn, what each turn rolls out, when the run
stops, when `dev` is measured, and the parallel methods. Its decisions (task sampling, proposal,
validation, promotion) live here too (`decisions`); the optimizer step's live with the step.
Nothing is imported here: each module is imported by its own name.
"""
