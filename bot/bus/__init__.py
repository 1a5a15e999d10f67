"""The message bus: accepted messages in a Redis Stream, read by turn workers."""
