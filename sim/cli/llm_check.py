"""`shoal llm-check URL [--model M]`: what an OpenAI-compatible endpoint can do, and what
Shoal will use with it (shoal.llm.check), as a table or `--json`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from shoal.cli.console import console, out, print_whole

if TYPE_CHECKING:
    from shoal.llm.check import CheckReport


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `shoal llm-check`."""
    p = sub.add_parser(
        "llm-check", help="probe an OpenAI-compatible endpoint: what works, and what Shoal "
                          "will use with it",
        description="Probe an OpenAI-compatible endpoint (chat, tool calls, JSON schema, "
                    "usage, prefix cache, tokenizer, context length, throughput) and say "
                    "what Shoal will use with it. Exit code 0: the endpoint answers chat; "
                    "2: bad input, or an endpoint that cannot be reached, is not "
                    "OpenAI-compatible or refuses the key; 3: it timed out or failed (429, "
                    "5xx).")
    p.add_argument("url", metavar="URL",
                   help="the base URL, e.g. http://localhost:8000/v1 ('loopback': start "
                        "Shoal's loopback server and probe that)")
    p.add_argument("--model", help="the model to ask (default: the first the server lists)")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="NAME of the environment variable holding the key")
    p.add_argument("--concurrency", default="1,2,4", metavar="N,N,...",
                   help="concurrencies to measure latency and throughput at (default: 1,2,4)")
    p.add_argument("--requests", type=int, default=8, metavar="N",
                   help="short requests per concurrency level, at least the level (default: 8)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="per request (default: 60)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=cmd_llm_check)


def cmd_llm_check(args: argparse.Namespace) -> int:
    """`shoal llm-check`."""
    # (imported here: httpx and tiktoken are not loaded for every other command)
    from shoal.llm.check import CheckOptions, check_endpoint, parse_concurrency
    from shoal.memory.tokens import count

    options = CheckOptions(parse_concurrency(args.concurrency), args.requests, args.timeout)

    def progress(line: str) -> None:
        console.print(line, markup=False, highlight=False)

    report = check_endpoint(args.url, args.model, args.api_key_env, options, count, progress)
    if args.json:
        sys.stdout.write(json.dumps(report.as_dict(), indent=2) + "\n")
        return 0
    print_whole(findings_table(report))
    out.print()
    print_whole(decision_table(report))
    return 0


def findings_table(report: CheckReport) -> Table:
    """A row per check and per concurrency level: the status and what was seen."""
    table = Table(box=None, title=Text(f"{report.url}, model {report.model} "
                                       f"({report.model_source})"), title_justify="left")
    for col in ("check", "result", "detail"):
        table.add_column(col, no_wrap=col != "detail")
    for name, finding in report.checks.items():
        shown = name if name.startswith("json") else name.replace("_", " ")
        table.add_row(shown, finding.status, Text(finding.detail))
    for lv in report.load:
        if lv.ok:
            tokens = (f"; {lv.completion_tokens_per_s:,.1f} completion tokens/s"
                      if lv.completion_tokens_per_s is not None else "")
            detail = (f"median {lv.median_ms:,.0f} ms; {lv.requests_per_s:,.2f} requests/s"
                      f"{tokens} ({lv.ok}/{lv.requests} answered)")
        else:
            detail = f"0/{lv.requests} answered"
        if lv.errors:
            detail += "; " + "; ".join(lv.errors[:2])
        table.add_row(f"concurrency {lv.concurrency}",
                      "yes" if lv.ok == lv.requests else "failed", Text(detail))
    return table


def decision_table(report: CheckReport) -> Table:
    """What Shoal will use, and why."""
    d = report.decision
    counter = d.token_counter + (f" ×{d.token_margin:.2f}" if d.token_margin else "")
    table = Table(box=None, title="what Shoal will use", title_justify="left")
    for col in ("setting", "value", "why"):
        table.add_column(col, no_wrap=col != "why")
    for name, value in (("output", d.output), ("token_counter", counter),
                        ("concurrency", str(d.concurrency))):
        table.add_row(name.replace("_", " "), value, Text(d.reasons.get(name, "")))
    return table
