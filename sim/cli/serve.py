"""`shoal serve [FOLDER]`: the browser app, REST API and MCP server over a folder of runs;
`shoal mcp [FOLDER]`: the MCP server alone, over standard input and output (docs/web.md)."""

from __future__ import annotations

import argparse
import ipaddress
import os

from shoal.cli.console import console
from shoal.core.errors import InputError

TOKEN_ENV = "SHOAL_SERVE_TOKEN"


def add_parsers(sub) -> None:
    """Register `shoal serve` and `shoal mcp`."""
    p = sub.add_parser("serve", help="a web app, REST API and MCP server over a folder of "
                                     "runs (docs/web.md)")
    p.add_argument("folder", nargs="?", default="runs", help="the runs' folder (default: runs)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; any other needs a token)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    p.add_argument("--token", help=f"a secret every request must carry (default: "
                                   f"${TOKEN_ENV}); required off 127.0.0.1")
    _common(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("mcp", help="the MCP server over standard input/output, for an "
                                   "assistant (docs/web.md)")
    p.add_argument("folder", nargs="?", default="runs", help="the runs' folder (default: runs)")
    _common(p)
    p.set_defaults(func=cmd_mcp)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--read-only", action="store_true",
                   help="refuse everything that starts, stops, forks or asks")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint for interviews and "
                                      "analyses of runs without an LLM of their own "
                                      "('loopback': the built-in test server)")
    p.add_argument("--model", help="its model")


def _folder(args: argparse.Namespace):
    from shoal.web.service import Folder

    return Folder(args.folder, args.read_only, args.base_url, args.model)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C."""
    import uvicorn

    from shoal.web.app import create_app

    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not _is_loopback(args.host) and token is None:
        raise InputError(f"--host {args.host}: serving beyond this machine needs a token "
                         f"(--token, or the environment variable {TOKEN_ENV})")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port {args.port}: must be 0..65535")
    folder = _folder(args)
    app = create_app(folder, token)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    console.print(f"serving [bold]{folder.root}[/] on http://{shown}:{args.port}/"
                  + (" (open it with #token=YOUR_TOKEN after the slash)" if token else "")
                  + (" read-only" if args.read_only else ""), highlight=False)
    # (an open event stream would otherwise hold Ctrl-C until the browser goes away)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                timeout_graceful_shutdown=3)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve MCP over standard input/output until it closes."""
    import anyio

    from shoal.web.mcp_server import build_server, run_stdio

    anyio.run(run_stdio, build_server(_folder(args)))
    return 0
