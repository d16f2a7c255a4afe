"""A small streamable-HTTP MCP server built with the official Python SDK (`mcp` on PyPI), for
muster's end-to-end tests. It binds a free port on 127.0.0.1, prints its endpoint's URL as its
first line of stdout, and serves until it is killed."""

import socket

import anyio
import mcp.types as types
import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("remote")


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False))
def ok(word: str) -> str:
    """Answer ok with the word."""
    return f"ok {word} over http"


async def main() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning")
    print(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", flush=True)
    await uvicorn.Server(config).serve(sockets=[listener])


if __name__ == "__main__":
    anyio.run(main)
