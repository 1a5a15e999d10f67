"""Token accounting and the reports built on it."""
