"""memd's torture harness: crash loops, power-loss replay, disk faults, fuzzing, traversal, other users, failing
dependencies and a soak, all against the real daemon over its real socket. Entry point: `torture/run.py`.

Not part of the memd package (nothing in memd imports it); it imports memd's own parsers to read files back and
`tests/harness.py` / `tests/fakellm.py` for configs and the fake LLM.
"""
