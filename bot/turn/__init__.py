"""The turn: one inbound message carried to its answer, resumable at every step."""
