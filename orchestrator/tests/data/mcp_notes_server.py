"""A small MCP server over stdio, built with the official Python SDK (`mcp` on PyPI), for
muster's end-to-end tests. It runs in the directory muster starts it in (the agent's
workspace) and works there."""

import os
import signal
import time
from pathlib import Path

import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def search(query: str) -> str:
    """Search the notes in the working directory."""
    notes = Path("notes.txt")
    text = notes.read_text() if notes.exists() else ""
    hits = [line for line in text.splitlines() if query in line]
    return f"{len(hits)} hit(s) for {query!r} in {os.getcwd()}: " + "; ".join(hits)


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=False))
def publish(text: str) -> str:
    """Publish a note: appends it to published.txt in the working directory."""
    with open("published.txt", "a") as out:
        out.write(text + "\n")
    return "published"


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def dump() -> str:
    """Return a very long text."""
    return "x" * 300_000


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True))
def fetch(url: str) -> str:
    """Read-only but open-world (no openWorldHint): records that it ran in fetched.txt."""
    with open("fetched.txt", "a") as out:
        out.write(url + "\n")
    return "fetched " + url


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer in time."""
    time.sleep(60)
    return "late"


@server.tool()
def kill_client() -> str:
    """Kill the process that started this server (muster), as a crash in the middle of a call."""
    os.kill(os.getppid(), signal.SIGKILL)
    return "unreachable"


def grown() -> str:
    """A tool that appears only after `grow`."""
    return "grown tool ran"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown` and tell the client the tool list changed."""
    server.add_tool(
        grown, annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    )
    await ctx.session.send_tool_list_changed()
    return "grew"


if __name__ == "__main__":
    server.run()
