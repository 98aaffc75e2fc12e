"""Pure decisions of reach: restart strategies, retry, routing choice, capability matching.

Nothing here imports ray or does I/O; time and randomness are passed in, so every policy is a pure
function that a unit test exercises in microseconds. A test keeps it so.
"""
