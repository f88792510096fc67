"""Graph memory: ingestion throughput, document ingestion, retrieval latency, and
`shoal init` on one-paragraph briefs.

    .venv/bin/python bench/graph.py            # 10k and 100k relations (a few minutes)
    .venv/bin/python bench/graph.py --quick    # 10k relations only (under a minute)
    .venv/bin/python bench/graph.py --init-only                     # 4. only (~1 minute)
    .venv/bin/python bench/graph.py --init-only --init-sizes 100k,200k   # (seconds)

1. **Activity ingestion, offline extractor.** Synthetic rounds shaped like a run's
   (`memory.graph.ingest.RoundActivity`: one text per posting agent, 1-3 posts joined, the
   agent's mean stance on the carbon tax) are ingested as a run does:
   `extract_activity(activity, OfflineExtractor(), topics)` then
   `apply_activity(graph, activity, extractions, topics)`. Posts state the author's
   position ("I oppose the carbon tax.") and third-party facts about a fixed, seeded list of
   names ("The Ministry of Finance opposes the carbon levy.", "Minister Ana Costa backs the
   Coastal Haulage Association.", "Small businesses support the rebate."). The synthetic
   world's positions flip between rounds (agents' stances drift), so relations accumulate
   and some get withdrawn. Reported: posts/s and relations/s over extraction + resolution,
   and each one's share of that time, per stretch of graph size.
2. **Document ingestion** (`ingest_document`): the three `examples/*.md` briefs repeated
   with their names replaced by names from the same list; relations/s and paragraphs/s.
   Also the same text without blank lines (one paragraph) at growing sizes.
3. **Retrieval** at ~10k and ~100k relations (the graph grown by the ingestion above):
   `FactIndex(graph)` build (first refresh), the per-round incremental refresh, and
   `search(query, k=5, as_of=None)` over ~200 varied queries (median, p95), with and
   without the neighbourhood expansion; `graph.visible()`; and a baseline in the same run:
   a pure-Python scan scoring every visible fact by its count of query-token occurrences
   (fact text and endpoint names tokenized once beforehand, as the index does).
4. **`shoal init` on one paragraph**: the command itself (a child process, offline
   extractor, 200 agents) on briefs that are one paragraph — the example briefs, names
   replaced as in 2., blank lines removed, cut to 100 KB, 200 KB, 1 MB and 5 MB (issue 26
   item 5). Reported: the child's CPU seconds (user + system), the same less the command's
   fixed cost (its CPU seconds on examples/bike_lanes.md: start-up, imports, writing 200
   personas), and the ratio per doubling of size between consecutive sizes
   ((t₂/t₁)^(1/log₂(s₂/s₁)), on the net seconds; linear ≈ 2, quadratic ≈ 4).

Rows are saved in bench/results/graph-<time>.json.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from shoal.memory.knowledge.extract import OfflineExtractor
from shoal.memory.knowledge.ingest import (
    RoundActivity,
    TopicNames,
    apply_activity,
    extract_activity,
    ingest_document,
)
from shoal.memory.knowledge.model import KnowledgeGraph
from shoal.memory.knowledge.retrieval import FactIndex, tokens

ROOT = Path(__file__).resolve().parents[1]
TOPICS = TopicNames(["carbon_tax"], ["the carbon tax"], [["carbon tax", "carbon levy"]])

FIRST = ["Ana", "Lena", "Tomas", "Maria", "Jonas", "Priya", "Omar", "Ines", "Karl", "Sofia",
         "Diego", "Hana", "Lukas", "Amara", "Felix", "Nora", "Ravi", "Elena", "Marta", "Yusuf"]
LAST = ["Costa", "Ortiz", "Novak", "Berg", "Silva", "Okafor", "Lindqvist", "Moreau", "Tanaka",
        "Haddad", "Keller", "Rossi", "Nowak", "Fischer", "Duarte", "Ahmed", "Larsen", "Weber"]
TITLES = ["Minister", "Senator", "Mayor", "Dr", "Professor", "Governor"]
REGIONS = ["National", "Northern", "Southern", "Coastal", "Metropolitan", "Rural", "Eastern",
           "Western", "Central", "Highland"]
SECTORS = ["Farmers'", "Haulage", "Transport", "Energy", "Retail", "Teachers'", "Nurses'",
           "Cyclists'", "Builders'", "Fishers'", "Taxi Drivers'", "Tenants'"]
ORG_WORDS = ["Union", "Association", "Council", "Federation", "Alliance", "Institute"]
MINISTRIES = ["Finance", "Transport", "Energy", "Agriculture", "Health", "Environment",
              "Industry", "Housing"]
GROUPS = ["Small businesses", "Farmers", "Commuters", "Rural residents", "Pensioners",
          "Taxpayers", "Truckers", "Households", "Young voters", "Employers", "Cyclists",
          "Landlords"]
ISSUES = ["rebate", "fuel duty", "rural bus lines", "diesel subsidy", "heating allowance",
          "congestion charge", "rail fares", "road tolls"]
SINGULAR = {1: ["supports", "backs", "welcomes", "endorses"],
            -1: ["opposes", "rejects", "criticises", "condemns"]}
PLURAL = {1: ["support", "back", "welcome", "endorse"],
          -1: ["oppose", "reject", "criticise", "condemn"]}
FIRST_PERSON = {1: "I support the carbon tax.", -1: "I oppose the carbon tax.",
                0: "I am undecided about the carbon tax."}
QUERY_WORDS = ["carbon tax", "carbon levy", "rebate", "fuel duty", "who supports", "opposes",
               "backs", "criticises", "rail fares", "road tolls", "subsidy", "union"]
HUB = 10_000  # adjacency entries walked by an expansion: a query "touching a hub"
MISSES = ["nuclear power plant", "housing market bubble", "football results", "ocean tides"]


def name_list(n: int, rng: np.random.Generator) -> list[str]:
    """`n` distinct names of people and organisations, drawn once from a seeded rng."""
    pool = [f"{t} {f} {s}" for t in TITLES for f in FIRST for s in LAST]
    pool += [f"{r} {s} {o}" for r in REGIONS for s in SECTORS for o in ORG_WORDS]
    pool += [f"Ministry of {m}" for m in MINISTRIES]
    return [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]


@dataclass
class World:
    """The synthetic truth posts report: third parties' positions (flipping between rounds)
    and agents' stances (drifting)."""

    names: list[str]
    n_agents: int
    rng: np.random.Generator
    on_topic: np.ndarray = field(init=False)  # name -> ±1 on the carbon tax
    on_name: np.ndarray = field(init=False)  # name x name -> ±1
    on_issue: np.ndarray = field(init=False)  # group x issue -> ±1
    stance: np.ndarray = field(init=False)  # agent -> [-1, 1]
    next_post: int = 0

    def __post_init__(self) -> None:
        n = len(self.names)
        self.on_topic = self.rng.choice([-1, 1], n)
        self.on_name = self.rng.choice([-1, 1], (n, n))
        self.on_issue = self.rng.choice([-1, 1], (len(GROUPS), len(ISSUES)))
        self.stance = self.rng.uniform(-1, 1, self.n_agents)

    def step(self, flip: float) -> None:
        """Positions flip with probability `flip`; stances drift."""
        for a in (self.on_topic, self.on_name, self.on_issue):
            a[self.rng.random(a.shape) < flip] *= -1
        self.stance = np.clip(self.stance + self.rng.normal(0, 0.25, self.n_agents), -1, 1)

    def sentence(self) -> str:
        """One third-party fact, true this round."""
        rng, names = self.rng, self.names
        kind = rng.random()
        a = int(rng.integers(len(names)))
        subject = names[a]
        if subject.startswith(("Ministry", *REGIONS)) and rng.random() < 0.5:
            subject = "The " + subject
        if kind < 0.35:
            verb = SINGULAR[int(self.on_topic[a])][int(rng.integers(4))]
            return f"{subject} {verb} the {'carbon levy' if rng.random() < 0.5 else 'carbon tax'}."
        if kind < 0.7:
            b = int(rng.integers(len(names) - 1))
            b += b >= a
            verb = SINGULAR[int(self.on_name[a, b])][int(rng.integers(4))]
            other = names[b] if not names[b].startswith("Ministry") else "the " + names[b]
            return f"{subject} {verb} {other}."
        if kind < 0.85:
            g, i = int(rng.integers(len(GROUPS))), int(rng.integers(len(ISSUES)))
            verb = PLURAL[int(self.on_issue[g, i])][int(rng.integers(4))]
            return f"{GROUPS[g]} {verb} the {ISSUES[i]}."
        verb = ["funds", "proposed", "announced", "subsidises"][int(rng.integers(4))]
        return f"{subject} {verb} the {ISSUES[int(rng.integers(len(ISSUES)))]}."

    def round(self, r: int, n_posting: int) -> RoundActivity:
        """Round r's activity: `n_posting` agents (ascending), 1-3 posts each."""
        rng = self.rng
        out = RoundActivity(r, f"2026-01-{1 + r % 28:02d} 09:00:00")
        for agent in np.sort(rng.choice(self.n_agents, n_posting, replace=False)).tolist():
            addressed = rng.random() < 0.9
            s = float(self.stance[agent])
            sign = 1 if s >= 0.2 else -1 if s <= -0.2 else 0
            posts = []
            for _ in range(int(rng.integers(1, 4))):
                parts = [FIRST_PERSON[sign]] if addressed else []
                parts += [self.sentence() for _ in range(int(rng.integers(1, 3)))]
                posts.append(" ".join(parts))
            ids = list(range(self.next_post, self.next_post + len(posts)))
            self.next_post += len(posts)
            out.agents.append(agent)
            out.usernames.append(f"user{agent:05d}")
            out.texts.append(" ".join(posts))
            out.post_ids.append(ids)
            out.stances.append([s if addressed else float("nan")])
        return out


@dataclass
class RoundTimes:
    """One ingested round."""

    relations_before: int
    relations: int  # added
    withdrawals: int  # added
    posts: int
    texts: int
    extract_s: float
    apply_s: float
    refresh_s: float  # the live index's incremental refresh after the round


def ingest_round(graph: KnowledgeGraph, index: FactIndex, world: World, r: int,
                 n_posting: int, flip: float) -> RoundTimes:
    """Build round r (untimed), then extract and resolve it (timed) as a run does."""
    world.step(flip)
    activity = world.round(r, n_posting)
    before = graph.n_relations, len(graph.withdrawn)
    extractor = OfflineExtractor()
    t0 = time.perf_counter()
    extractions = extract_activity(activity, extractor, TOPICS)
    t1 = time.perf_counter()
    apply_activity(graph, activity, extractions, TOPICS)
    t2 = time.perf_counter()
    index.refresh()
    t3 = time.perf_counter()
    return RoundTimes(before[0], graph.n_relations - before[0],
                      len(graph.withdrawn) - before[1],
                      sum(len(p) for p in activity.post_ids), len(activity.texts),
                      t1 - t0, t2 - t1, t3 - t2)


def ingestion_row(rounds: list[RoundTimes], label: str) -> dict:
    """Throughput over a stretch of rounds."""
    ext = sum(r.extract_s for r in rounds)
    app = sum(r.apply_s for r in rounds)
    rel = sum(r.relations for r in rounds)
    posts = sum(r.posts for r in rounds)
    return {"stretch": label, "rounds": len(rounds), "posts": posts,
            "texts": sum(r.texts for r in rounds), "relations": rel,
            "withdrawals": sum(r.withdrawals for r in rounds),
            "extract_s": ext, "apply_s": app, "posts_per_s": posts / (ext + app),
            "relations_per_s": rel / (ext + app), "extract_share": ext / (ext + app),
            "apply_ms_per_text": 1e3 * app / sum(r.texts for r in rounds),
            "extract_ms_per_text": 1e3 * ext / sum(r.texts for r in rounds),
            "refresh_ms_median": 1e3 * statistics.median(r.refresh_s for r in rounds)}


def queries(names: list[str], n: int, rng: np.random.Generator) -> list[str]:
    """`n` varied queries: names, names with topic or issue words, name pairs, agent
    handles, groups and issues, and a few that match nothing."""
    out = []
    for i in range(n):
        kind = i % 8
        a, b = (names[int(j)] for j in rng.choice(len(names), 2, replace=False))
        word = QUERY_WORDS[int(rng.integers(len(QUERY_WORDS)))]
        if kind == 0:
            out.append(a)
        elif kind in (1, 2):
            out.append(f"{a} {word}")
        elif kind == 3:
            out.append(f"{a} and {b}")
        elif kind == 4:
            out.append(f"@user{int(rng.integers(0, 20000)):05d} carbon tax")
        elif kind == 5:
            g = GROUPS[int(rng.integers(len(GROUPS)))]
            out.append(f"what do {g.lower()} think of the {ISSUES[int(rng.integers(8))]}")
        elif kind == 6:
            out.append(f"who {word} the carbon levy")
        else:
            out.append(MISSES[int(rng.integers(len(MISSES)))])
    return out


def brute_force(docs: list[list[str]], visible: np.ndarray, query: str,
                k: int = 5) -> list[int]:
    """The baseline: every visible fact scored by how many of its tokens are query
    tokens, in pure Python; the `k` best (ties: the older first)."""
    q = set(tokens(query))
    vis = visible.tolist()
    scored = ((sum(1 for w in doc if w in q), -rid) for rid, doc in enumerate(docs)
              if vis[rid])
    return [-rid for s, rid in heapq.nlargest(k, scored) if s > 0]


def ms(xs: list[float]) -> tuple[float, float]:
    """Median and p95 of seconds, in ms."""
    return 1e3 * float(np.median(xs)), 1e3 * float(np.percentile(xs, 95))


def retrieval(graph: KnowledgeGraph, qs: list[str]) -> dict:
    """Index build, search latency (two passes; the second is reported), visibility and
    the brute-force baseline, on the graph as it is."""
    gc.collect()
    row: dict = {"relations": graph.n_relations, "withdrawn": len(graph.withdrawn),
                 "entities": graph.n_entities}
    index = FactIndex(graph)
    t0 = time.perf_counter()
    index.refresh()
    row["build_s"] = time.perf_counter() - t0
    first = []
    for q in qs:  # first pass: includes building each term's posting arrays
        t0 = time.perf_counter()
        index.search(q, k=5, as_of=None)
        first.append(time.perf_counter() - t0)
    row["search_first_pass_mean_ms"] = 1e3 * statistics.mean(first)
    rel = graph.rows["graph_relations"].columns
    walked = []  # adjacency entries the expansion walks: those of the best hits' endpoints
    by_expand: dict[bool, list[float]] = {}
    for expand in (True, False):
        times, n_hits = [], 0
        for q in qs:
            t0 = time.perf_counter()
            hits = index.search(q, k=5, as_of=None, expand=expand)
            times.append(time.perf_counter() - t0)
            n_hits += len(hits)
            if not expand:
                walked.append(sum(len(index.adjacent.get(e, [])) for h in hits for e in
                                  (rel["subject"][h.relation_id], rel["object"][h.relation_id])))
        by_expand[expand] = times
        key = "search" if expand else "search_noexpand"
        row[f"{key}_median_ms"], row[f"{key}_p95_ms"] = ms(times)
        row[f"{key}_mean_ms"] = 1e3 * statistics.mean(times)
        row[f"{key}_hits_mean"] = n_hits / len(qs)
    # queries whose best hits touch a hub entity (the topic) against the others
    hub = [w >= HUB for w in walked]
    for name, sel in (("hub", True), ("other", False)):
        picked = [t for t, h in zip(by_expand[True], hub, strict=True) if h == sel]
        row[f"{name}_queries"] = len(picked)
        row[f"{name}_search_median_ms"] = 1e3 * statistics.median(picked) if picked else None
        row[f"{name}_walked_median"] = statistics.median(
            [w for w, h in zip(walked, hub, strict=True) if h == sel] or [0])
    scores = []
    for q in qs:
        t0 = time.perf_counter()
        index.scores(q)
        scores.append(time.perf_counter() - t0)
    row["scores_median_ms"], row["scores_p95_ms"] = ms(scores)
    vis = []
    for _ in range(20):
        t0 = time.perf_counter()
        graph.visible()
        vis.append(time.perf_counter() - t0)
    row["visible_median_ms"], _ = ms(vis)
    conv = []  # what scores() does first on every call: the lengths list to an array
    for _ in range(20):
        t0 = time.perf_counter()
        np.asarray(index.lengths, np.float64)
        conv.append(time.perf_counter() - t0)
    row["lengths_array_median_ms"], _ = ms(conv)
    # the baseline: same text as the index (fact + endpoint names), tokenized once
    names = graph.column("graph_entities", "name")
    t0 = time.perf_counter()
    docs = [tokens(f"{f} {names[s]} {names[o]}") for f, s, o in
            zip(rel["fact"], rel["subject"], rel["object"], strict=True)]
    row["brute_tokenize_s"] = time.perf_counter() - t0
    brute = []
    for q in qs:
        t0 = time.perf_counter()
        brute_force(docs, graph.visible(), q)
        brute.append(time.perf_counter() - t0)
    row["brute_median_ms"], row["brute_p95_ms"] = ms(brute)
    row["brute_mean_ms"] = 1e3 * statistics.mean(brute)
    row["ratio_search_over_brute"] = row["search_median_ms"] / row["brute_median_ms"]
    row["ratio_noexpand_over_brute"] = row["search_noexpand_median_ms"] / row["brute_median_ms"]
    row["expand_top_adjacency"] = max(len(v) for v in index.adjacent.values())
    return row


# ------------------------------------------------------------------ documents

DOC_NAMES = ["Ministry of Finance", "Green Transport Alliance",
             "National Institute of Economic Research", "National Farmers' Union",
             "Road Haulage Association", "Consumer Council", "Federation of Small Businesses",
             "City Council", "Harbour Cyclists' Association",
             "Parents' Association of Harbour Primary School", "Chamber of Commerce",
             "Taxi Drivers' Union", "Disability Rights Network", "Department of Public Service",
             "Public Servants' Union", "Taxpayers' Alliance", "Chamber of Industry",
             "Northfield University", "Opposition Party", "Ana Costa", "Lena Ortiz"]
_DOC_NAME = re.compile("|".join(re.escape(n) for n in sorted(DOC_NAMES, key=len,
                                                               reverse=True)))


def document(names: list[str], reps: int, rng: np.random.Generator) -> str:
    """The example briefs `reps` times, each time with their names replaced by names
    from the list (people by a first and last name, organisations by an organisation)."""
    base = "\n\n".join(p.read_text() for p in sorted((ROOT / "examples").glob("*.md")))
    orgs = [n for n in names if n.split()[0] not in TITLES]
    people = [f"{f} {s}" for f in FIRST for s in LAST]
    parts = []
    for _ in range(reps):
        def sub(m: re.Match) -> str:
            pool = people if m.group(0) in ("Ana Costa", "Lena Ortiz") else orgs
            return pool[int(rng.integers(len(pool)))]
        parts.append(_DOC_NAME.sub(sub, base))
    return "\n\n".join(parts)


def documents(names: list[str], reps: int, one_paragraph_reps: list[int]) -> list[dict]:
    """`ingest_document` on the long document, and on the same text with no blank lines."""
    rows = []
    for reps_, one in [(reps, False), *[(n, True) for n in one_paragraph_reps]]:
        text = document(names, reps_, np.random.default_rng(1))
        if one:
            text = re.sub(r"\n\s*\n", "\n", text)
        graph = KnowledgeGraph()
        gc.collect()
        t0 = time.perf_counter()
        counts = ingest_document(graph, "brief.md", text, OfflineExtractor(), TOPICS)
        dt = time.perf_counter() - t0
        rows.append({"form": "one paragraph" if one else "paragraphs", "reps": reps_,
                     "chars": len(text), "seconds": dt, **counts,
                     "withdrawn": len(graph.withdrawn),
                     "relations_per_s": counts["relations"] / dt,
                     "paragraphs_per_s": counts["episodes"] / dt,
                     "kchars_per_s": len(text) / dt / 1e3})
    return rows


# ------------------------------------------------------------------ shoal init


def one_paragraph(names: list[str], chars: int) -> str:
    """The example briefs, names replaced (`document`), as one paragraph of `chars`
    characters: blank lines removed, cut at the last full stop before `chars`."""
    reps, text = 1, ""
    while len(text) < chars:
        reps *= 2
        text = re.sub(r"\n\s*\n", "\n", document(names, reps, np.random.default_rng(1)))
    text = text[:chars]
    return text[:text.rfind(".") + 1]


def init_cpu(brief: Path, out: Path) -> float:
    """CPU seconds (user + system) of one `shoal init BRIEF --out OUT` child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "shoal.cli", "init", str(brief), "--out", str(out),
                    "--force"], cwd=ROOT, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def init_scaling(names: list[str], sizes: list[int]) -> list[dict]:
    """`shoal init` on one-paragraph briefs of growing size: CPU seconds, net of the
    command's fixed cost, and the ratio per doubling between consecutive sizes."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        fixed = init_cpu(ROOT / "examples" / "bike_lanes.md", Path(tmp) / "fixed")
        for size in sizes:
            brief = Path(tmp) / f"brief-{size}.md"
            brief.write_text(one_paragraph(names, size), encoding="utf-8")
            cpu = init_cpu(brief, Path(tmp) / f"out-{size}")
            row = {"bytes": brief.stat().st_size, "cpu_s": cpu, "fixed_cpu_s": fixed,
                   "net_cpu_s": max(cpu - fixed, 1e-3), "ratio_per_doubling": None}
            if rows:
                prev = rows[-1]
                row["ratio_per_doubling"] = (row["net_cpu_s"] / prev["net_cpu_s"]) ** (
                    1 / math.log2(row["bytes"] / prev["bytes"]))
            rows.append(row)
            print(f"# shoal init, one paragraph of {row['bytes']:,} bytes: {cpu:.2f} CPU-s",
                  flush=True)
    return rows


def _size(text: str) -> int:
    """"100k" → 100,000; "5m" → 5,000,000 (decimal, as the issue counts)."""
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def print_init(rows: list[dict]) -> None:
    """The `shoal init` table."""
    print("\n`shoal init` on one paragraph (offline extractor, 200 agents; CPU seconds of "
          "the child process)")
    print(f"{'bytes':>10} {'CPU s':>7} {'net CPU s':>9} {'per doubling':>12}")
    for r in rows:
        ratio = f"{r['ratio_per_doubling']:.2f}" if r["ratio_per_doubling"] else "—"
        print(f"{r['bytes']:>10,} {r['cpu_s']:>7.2f} {r['net_cpu_s']:>9.2f} {ratio:>12}")
    if rows:
        print(f"(fixed cost, examples/bike_lanes.md: {rows[0]['fixed_cpu_s']:.2f} CPU-s)")


# ------------------------------------------------------------------ main


def main() -> None:
    """Grow the graph by ingestion to each size, measure retrieval there; documents; print
    tables; save rows."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k relations only")
    ap.add_argument("--names", type=int, default=300, help="third parties in the world")
    ap.add_argument("--agents", type=int, default=20000, help="agents who may post")
    ap.add_argument("--posting", type=int, default=1000, help="posting agents per round")
    ap.add_argument("--flip", type=float, default=0.05,
                    help="per-round probability that a third party's position flips")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--doc-reps", type=int, default=100,
                    help="repetitions of the example briefs in the document")
    ap.add_argument("--init-sizes", help="sizes of the one-paragraph briefs given to "
                    "`shoal init` (default 100k,200k,1m,5m; with --quick 100k,200k)")
    ap.add_argument("--init-only", action="store_true",
                    help="measure only `shoal init` on one paragraph")
    args = ap.parse_args()
    sizes = [10_000] if args.quick else [10_000, 100_000]
    rng = np.random.default_rng(0)
    names = name_list(args.names, rng)
    init_sizes = args.init_sizes or ("100k,200k" if args.quick else "100k,200k,1m,5m")
    inits = init_scaling(names, [_size(x) for x in init_sizes.split(",")])
    if args.init_only:
        print_init(inits)
        _save({"args": vars(args), "init": inits})
        return
    world = World(names, args.agents, rng)
    qs = queries(names, args.queries, np.random.default_rng(2))
    graph = KnowledgeGraph()
    live = FactIndex(graph)
    rounds: list[RoundTimes] = []
    stretches, retrievals = [], []
    r, start = 0, 0
    for size in sizes:
        while graph.n_relations < size:
            r += 1
            rounds.append(ingest_round(graph, live, world, r, args.posting, args.flip))
        label = f"{rounds[start].relations_before:,} -> {graph.n_relations:,}"
        stretches.append(ingestion_row(rounds[start:], label))
        start = len(rounds)
        retrievals.append(retrieval(graph, qs))
        print(f"# {graph.n_relations:,} relations after {r} rounds", flush=True)
    stretches.append(ingestion_row(rounds, f"all {r} rounds"))
    one_par = [5, 10, 20] if args.quick else [10, 20, 40]
    docs = documents(names, 20 if args.quick else args.doc_reps, one_par)

    print("\nActivity ingestion, offline extractor (extraction + resolution)")
    print(f"{'relations':>20} {'rounds':>6} {'posts':>8} {'new rel':>8} {'withdr':>7} "
          f"{'posts/s':>8} {'rel/s':>7} {'extract':>8} {'ms/text ext':>11} "
          f"{'ms/text apply':>13} {'refresh ms':>10}")
    for s in stretches:
        print(f"{s['stretch']:>20} {s['rounds']:>6} {s['posts']:>8,} {s['relations']:>8,} "
              f"{s['withdrawals']:>7,} {s['posts_per_s']:>8,.0f} {s['relations_per_s']:>7,.0f} "
              f"{s['extract_share']:>7.0%} {s['extract_ms_per_text']:>11.3f} "
              f"{s['apply_ms_per_text']:>13.3f} {s['refresh_ms_median']:>10.1f}")
    print("\nDocument ingestion (ingest_document, offline)")
    print(f"{'form':>14} {'reps':>5} {'chars':>9} {'s':>7} {'paras':>6} {'relations':>9} "
          f"{'rel/s':>7} {'paras/s':>8} {'kchar/s':>8}")
    for d in docs:
        print(f"{d['form']:>14} {d['reps']:>5} {d['chars']:>9,} {d['seconds']:>7.2f} "
              f"{d['episodes']:>6,} {d['relations']:>9,} {d['relations_per_s']:>7,.0f} "
              f"{d['paragraphs_per_s']:>8,.0f} {d['kchars_per_s']:>8,.1f}")
    print(f"\nRetrieval, {len(qs)} queries, k = 5, as_of = None (ms; median / p95)")
    print(f"{'relations':>9} {'withdrawn':>9} {'build s':>7} {'search':>15} "
          f"{'no expand':>15} {'BM25 only':>9} {'brute force':>15} {'search÷brute':>12} "
          f"{'noexp÷brute':>11} {'visible()':>9}")
    for t in retrievals:
        print(f"{t['relations']:>9,} {t['withdrawn']:>9,} {t['build_s']:>7.2f} "
              f"{t['search_median_ms']:>7.2f} / {t['search_p95_ms']:>5.1f} "
              f"{t['search_noexpand_median_ms']:>7.2f} / {t['search_noexpand_p95_ms']:>5.1f} "
              f"{t['scores_median_ms']:>9.2f} "
              f"{t['brute_median_ms']:>7.1f} / {t['brute_p95_ms']:>5.1f} "
              f"{t['ratio_search_over_brute']:>12.3f} {t['ratio_noexpand_over_brute']:>11.3f} "
              f"{t['visible_median_ms']:>9.2f}")
    for t in retrievals:
        print(f"  at {t['relations']:,}: first pass after build "
              f"{t['search_first_pass_mean_ms']:.2f} ms mean; "
              f"mean search {t['search_mean_ms']:.2f} / no expand "
              f"{t['search_noexpand_mean_ms']:.2f} / brute {t['brute_mean_ms']:.1f} ms; "
              f"hits {t['search_hits_mean']:.1f}; largest entity adjacency "
              f"{t['expand_top_adjacency']:,}; entities {t['entities']:,}")
        print(f"    search median by expansion walk: {t['hub_queries']} queries walking "
              f">= {HUB:,} adjacency entries (median {t['hub_walked_median']:,.0f}): "
              f"{t['hub_search_median_ms'] or float('nan'):.2f} ms; {t['other_queries']} "
              f"others (median {t['other_walked_median']:,.0f}): "
              f"{t['other_search_median_ms'] or float('nan'):.2f} ms")
        print(f"    per scores() call, lengths list -> array: "
              f"{t['lengths_array_median_ms']:.2f} ms; visible(): "
              f"{t['visible_median_ms']:.2f} ms")
    print_init(inits)
    _save({"args": vars(args), "ingestion": stretches, "rounds": [vars(x) for x in rounds],
           "documents": docs, "retrieval": retrievals, "init": inits})


def _save(rows: dict) -> None:
    """The rows as bench/results/graph-<time>.json."""
    out = ROOT / "bench" / "results" / f"graph-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print(f"\nrows: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
