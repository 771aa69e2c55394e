"""Problem tools: what waits for the operator, and the one-word answers."""

from __future__ import annotations

from typing import Annotated, Any

from pilothouse.core.mcp.base import Host, PilotServer, check_text
from pilothouse.core.mcp.untrusted import fence
from pydantic import Field


def register(server: PilotServer, host: Host) -> None:
    @server.tool(description="Open problems (all with include_closed), each with its code, kind, summary, "
                 "evidence and the replies it takes.")
    def problem_list(job: str | None = None, include_closed: bool = False) -> list[dict[str, Any]]:
        from pilothouse.core.stops import problems

        return fence([p.as_dict() for p in problems.list_problems(host.layout(), not include_closed, job=job)])

    @server.tool(description="Answer a problem: reply is one of the replies it lists (retry, accept, skip, "
                 "dismiss, hint, plan); hint and plan need words.")
    def problem_act(code: Annotated[str, Field(description="the six-letter code")], reply: str,
                    words: str | None = None) -> dict[str, Any]:
        from pilothouse.core.stops import answering

        check_text(words, "words")
        return fence(answering.act(host.layout(), code, reply, words, who=host.who))
