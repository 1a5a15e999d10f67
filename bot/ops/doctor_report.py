"""The doctor's report: the marked lines one check writes, and how long a check may take."""

from __future__ import annotations

from dataclasses import dataclass, field

OK, WARN, FAIL = "✓", "⚠", "✗"
#: Seconds one network check may take before it counts as unreachable.
CHECK_TIMEOUT = 15.0


@dataclass(slots=True)
class Report:
    """The lines of one check, in order."""

    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def ok(self, what: str, text: str) -> None:
        self.lines.append((OK, what, text))

    def warn(self, what: str, text: str) -> None:
        self.lines.append((WARN, what, text))

    def fail(self, what: str, text: str) -> None:
        self.lines.append((FAIL, what, text))

    @property
    def failed(self) -> bool:
        return any(mark == FAIL for mark, _, _ in self.lines)
