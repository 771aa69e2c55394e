"""The wire-neutral view of one request to the sim, and of the reply it sends back.

Each wire module (chat completions, Responses, Messages) parses its own request shape into a
SimRequest; the script engine answers with a Reply; the wire module encodes the Reply again.
Stdlib only: the sim must start in a few milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MODE_MARKER = re.compile(r"\[pilothouse mode:\s*([A-Za-z0-9_-]+)\]")
# Claude Code and OpenCode write "Working directory: /abs" (Claude sometimes "Primary working
# directory:"); Codex sends an <environment_context> with <cwd>/abs</cwd>.
_CWD_PATTERNS = (
    re.compile(r"[Ww]orking directory:\s*(/[^\n<]*)"),
    re.compile(r"<cwd>\s*(/[^<\n]*?)\s*</cwd>"),
)


@dataclass
class ToolDecl:
    """A tool the client declared: name, kind and its JSON-schema properties."""

    name: str
    kind: str = "function"  # function | custom (freeform, e.g. Codex apply_patch) | local_shell | namespaced | …
    properties: dict[str, dict[str, Any]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    description: str = ""
    namespace: str | None = None  # kind namespaced: the Responses namespace it was declared in


@dataclass
class ToolCall:
    """One tool call the sim makes; `arguments` is a JSON text for functions, raw input for custom tools."""

    id: str
    name: str
    arguments: str
    kind: str = "function"
    namespace: str | None = None  # Responses: a tool declared inside a namespace (Codex's MCP servers)


@dataclass
class Message:
    role: str  # system | user | assistant | tool
    text: str
    assistant_output: bool = False  # produced by the model (assistant text, tool call, reasoning)


@dataclass
class SimRequest:
    wire: str
    model: str
    stream: bool
    messages: list[Message]
    tools: list[ToolDecl]
    system: str = ""
    include_usage: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    # the run's worktree as the dispatch knows it (not the cwd the request claims): the only tree
    # the sim reads on the host; None for a standalone `sim serve`
    root: str | None = None

    @property
    def prompt(self) -> str:
        """The worker prompt: the first user message carrying a mode marker, else the first user message.

        (Codex sends its environment context as a user message before the task.)"""
        users = [m.text for m in self.messages if m.role == "user"]
        for text in users:
            if MODE_MARKER.search(text):
                return text
        return users[0] if users else ""

    @property
    def mode(self) -> str | None:
        m = MODE_MARKER.search(self.prompt)
        return m.group(1) if m else None

    @property
    def assistant_turns(self) -> int:
        """How many model turns the history holds: runs of consecutive model-produced items.

        A turn that made several tool calls is one run (Responses lists each call as its own
        item; Claude Code may split one turn into several assistant messages)."""
        turns, inside = 0, False
        for m in self.messages:
            if m.assistant_output:
                if not inside:
                    turns += 1
                inside = True
            elif m.role != "system":
                inside = False
        return turns

    @property
    def chars(self) -> int:
        return len(self.system) + sum(len(m.text) for m in self.messages)

    @property
    def cwd(self) -> str | None:
        texts = [self.system] + [m.text for m in self.messages if m.role in ("user", "system")]
        for text in texts:
            for pattern in _CWD_PATTERNS:
                found = pattern.search(text)
                if found:
                    return found.group(1).strip()
        return None


@dataclass
class Usage:
    """Tokens served for one response, in one meaning for every wire:
    input = uncached input, output = visible output (reasoning separate), cache_* separate.
    The wire modules fold them into each wire's own convention."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"input": self.input, "output": self.output, "reasoning": self.reasoning,
                "cache_read": self.cache_read, "cache_write": self.cache_write}


@dataclass
class Reply:
    text: str
    calls: list[ToolCall]
    usage: Usage
    cut: bool = False  # stopped at the output cap

    @property
    def finish(self) -> str:
        if self.cut:
            return "length"
        return "tool_calls" if self.calls else "stop"


def content_text(content: Any) -> str:
    """Flatten the many content shapes (str, list of parts/blocks, nested tool results) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (content_text(p) for p in content) if t)
    if isinstance(content, dict):
        for key in ("text", "content", "output", "input", "arguments"):
            if key in content:
                return content_text(content[key])
        return ""
    return str(content)


def pieces(text: str, size: int = 16) -> list[str]:
    """Split text into stream deltas (none for empty text)."""
    return [text[i:i + size] for i in range(0, len(text), size)]
