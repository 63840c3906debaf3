"""`gpudeck mcp`: an MCP server for agents over this API (tui.mcp), on stdio or on 127.0.0.1 over HTTP."""

from __future__ import annotations

import os
import secrets

import click

from models.common import EXIT_OK, EXIT_USAGE
from tui.cli.base import client, connection_options

LOOPBACK = ("127.0.0.1", "localhost")
SECRET_ENV = "GPUDECK_MCP_SECRET"
"""The HTTP transport's secret (default: a new random one each start, printed with the URL)."""


def http_address(raw: str) -> tuple[str, int] | str:
    """`PORT` or `127.0.0.1:PORT` -> (host, port); what is wrong with it, as a message, otherwise."""
    host, _, port = raw.rpartition(":")
    host = host or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"--http: a port (8765) or 127.0.0.1:PORT, got {raw!r}"
    if host not in LOOPBACK:
        return (
            f"--http: the MCP server answers on 127.0.0.1 only (it acts with this token's rights and has no login of "
            f"its own), got {host!r}; an agent on another host runs its own `gpudeck mcp` with its own token"
        )
    return "127.0.0.1", int(port)


@click.command(name="mcp")
@click.option("--http", "http", metavar="[127.0.0.1:]PORT", help="serve MCP's HTTP transport there (default: stdio)")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="also offer submit, cancel, priority, move and delete (each with dry_run); default: read-only tools",
)
@connection_options
def mcp(http: str | None, allow_writes: bool) -> int:
    """Serve gpudeck to an agent over the Model Context Protocol: a client of this API with its token (the API's
    rules hold: owner, admin, command rights, quotas). Read-only unless --allow-writes."""
    where = http_address(http) if http else None
    if isinstance(where, str):
        click.echo(f"gpudeck mcp: {where}", err=True)
        return EXIT_USAGE
    try:
        from tui.mcp import server
    except ImportError as exc:  # (the SDK is an extra: gpudeck[mcp])
        click.echo(f"gpudeck mcp: the MCP SDK is not installed ({exc}): pip install 'gpudeck[mcp]'", err=True)
        return EXIT_USAGE
    app = server(client(), allow_writes=allow_writes)
    if where is None:
        app.run("stdio")
    else:
        from tui.mcp import serve_http

        host, port = where
        secret = os.environ.get(SECRET_ENV) or secrets.token_urlsafe(24)
        click.echo(
            f"gpudeck mcp: MCP over HTTP at http://{host}:{port}/mcp?token={secret} "
            f"({'read-write' if allow_writes else 'read-only'}; or the header 'Authorization: Bearer {secret}'). "
            "Every process of this host reaches 127.0.0.1, jobs included: a request without the token is refused",
            err=True,
        )
        serve_http(app, host, port, secret)
    return EXIT_OK


COMMANDS = (mcp,)
