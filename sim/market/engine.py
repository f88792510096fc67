"""The market's part in a round (the `PlatformEngine` hooks, sim/world/platform_engine.py).

    begin_round  social → market: the digest of the posts since the last round (sentiment
                 on each market's topic, top posts); market → social: news of last round's
                 large price moves, pinned to the social feeds
    decide       rule-based traders, vectorised (sim/market/traders.py); LLM traders decide
                 in their shards with the buy/sell tools
    apply        the round's trades, in canonical order, each checked against the books
    end_round    prices recorded, markets due resolved and paid out, conservation checked
    tables       prices, trades, positions, market_bridge, market_books, forecasts, payouts

Its random draws are its own (purpose MARKET, keyed by market), so a market never moves
the social platforms' random streams: with the market → social direction off, the social
tables are those of the same run without markets.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shoal.agents.actions import ActionBatch
from shoal.agents.prompt import SectionSpec, section_spec
from shoal.core.counter_rng import CounterRNG, Purpose
from shoal.core.language import Templates, templates
from shoal.core.state import State
from shoal.core.vocabulary import ActionType, Reason
from shoal.market.book import Books, Trade
from shoal.market.config import MarketConfig, MarketPlatformConfig
from shoal.market.traders import order, subjective
from shoal.memory.context import Line, Section, quote
from shoal.platforms.spec import spec
from shoal.world.platform_engine import PlatformEngine, Publish

NAME = "market"
_MEMBERS = 6  # round-0 generator key of the traders' selection (after the world's 1..5)


class MarketEngine(PlatformEngine):
    """The prediction market of one run: its books and the bridge's bookkeeping."""

    def __init__(self, cfg: MarketPlatformConfig, world):
        from shoal.world.selection import select  # the world's own selection of agents

        self.cfg = cfg
        self.code = spec(NAME).code
        self.topics = list(world.cfg.topic_names)
        seed = world.cfg.seed
        members = select(cfg.members, world.population,
                         lambda: CounterRNG(seed).generator(_MEMBERS, self.code),
                         f"platforms.{NAME}.members")
        members &= world.alive
        self.books = Books.create(cfg.markets, members, cfg.budget, world.cfg.rounds)
        self.rng = CounterRNG(seed)
        self.moves: dict[int, float] = {}  # market -> largest |move| in the last round
        self.volume: dict[int, float] = {}  # market -> cash traded in the last round
        self.sentiment: dict[int, float] = {}  # market -> mean stance of the digest's posts
        self.digest_posts: dict[int, list[int]] = {}  # market -> top post ids
        self._reset_round()

    def _reset_round(self) -> None:
        self.targets: list[np.ndarray] = []  # rule traders' probabilities, by order - 1
        self.trades: list[Trade] = []
        self.bridge: list[dict] = []
        self.payouts: list[dict] = []
        self.forecasts: list[dict] = []
        self.opened_prices = [m.maker.prices() for m in self.books.markets]
        self.positions = self._positions_table(0)

    # ---------------------------------------------------------------- config

    @property
    def members(self) -> np.ndarray:
        """Traders (bool [N])."""
        return self.books.members

    def reconfigure(self, cfg: MarketPlatformConfig) -> None:
        """Take new settings (a `set` intervention or a fork); the markets stay."""
        if [m.model_dump() for m in cfg.markets] != [m.model_dump() for m in self.cfg.markets]:
            from shoal.core.errors import InputError

            raise InputError(f"platforms.{NAME}.markets: markets cannot change during a run "
                             "(a fork may change how traders trade and the bridge)")
        self.cfg = cfg

    def grow(self, n: int) -> None:
        """Rows for agents who joined (they do not trade)."""
        self.books.grow(n)

    def _topic(self, m: MarketConfig) -> int | None:
        return self.topics.index(m.topic) if m.topic is not None else None

    # ---------------------------------------------------------------- round hooks

    def begin_round(self, world, r: int, publish: Publish) -> None:
        """Market → social: news of last round's large price moves, published to the
        social platforms' feeds (the social → market digest was made at the end of the
        last round, from what the feeds showed)."""
        self._reset_round()
        m2s = self.cfg.bridge.market_to_social
        if m2s.enabled and m2s.news_threshold is not None:
            for i, move in sorted(self.moves.items()):
                if abs(move) >= m2s.news_threshold:
                    self._news(world, r, i, publish)
        self.moves = {}

    def digest(self, world, r: int, shown: np.ndarray) -> None:
        """Social → market: per market, what the social feeds showed in round r on its
        topic — the mean stance over every impression (a post seen by many counts many
        times; pinned breaking news reaches everyone) and the most-seen posts. Traders
        read it in round r + 1."""
        self.sentiment, self.digest_posts = {}, {}
        s2m = self.cfg.bridge.social_to_market
        if not s2m.enabled:
            return
        shown = shown[shown >= 0]
        for i, m in enumerate(self.books.markets):
            t = self._topic(m.cfg)
            if t is None or not len(shown):
                continue
            stance = world.posts.stance[shown, t]
            on = ~np.isnan(stance)
            if not on.any():
                continue
            value = float(stance[on].mean())
            ids, seen = np.unique(shown[on], return_counts=True)
            top = ids[np.lexsort((ids, -seen))][: s2m.top_posts].tolist()
            self.sentiment[i], self.digest_posts[i] = value, top
            self.bridge.append({"direction": "social_to_market", "market": i,
                                "kind": "sentiment", "value": value, "post_ids": top,
                                "detail": f"{int(on.sum())} impressions of "
                                          f"{len(ids)} posts on {m.cfg.topic}"})

    def _news(self, world, r: int, i: int, publish: Publish) -> None:
        m = self.books.markets[i]
        p = m.maker.prices()
        before = m.prices_before if m.prices_before is not None else self.opened_prices[i]
        k = int(np.argmax(np.abs(p - before)))
        # a post everyone may see: in the run's language, like round memory's items
        text = templates(world.cfg.population.language)(
            "market.news", question=m.cfg.question, outcome=m.outcomes[k],
            price=f"{p[k]:.0%}", points=f"{100 * (p[k] - before[k]):+.0f}")
        stance = {}
        if m.cfg.topic is not None:
            stance[m.cfg.topic] = float(np.dot(p, m.cfg.anchors()))
        ids = publish(text, stance, self.cfg.bridge.market_to_social.news_rounds, i)
        self.bridge.append({"direction": "market_to_social", "market": i, "kind": "news",
                            "value": float(p[k] - before[k]), "post_ids": ids,
                            "detail": text})

    def decide(self, world, r: int, agents: np.ndarray, llm_agents: np.ndarray
               ) -> ActionBatch:
        """The rule-based traders' orders this round (LLM traders excluded): one row per
        trader and open market whose probability differs from the snapshot's price by
        more than `min_edge` on some outcome, at most `max_actions_per_round` per trader
        (largest difference first). A row carries the trader's probabilities (kept here,
        referenced by `order`); its side and size are set when it applies."""
        agents = agents[~np.isin(agents, llm_agents)] if len(llm_agents) else agents
        t = self.cfg.trading
        self.targets = []
        parts = []
        for m in self.books.markets:
            ti = self._topic(m.cfg)
            if ti is None or not m.is_open(r) or not len(agents):
                continue
            q = self._subjective(world, r, m.index, ti, agents)
            gap = np.abs(q - m.maker.prices()[None, :]).max(axis=1)
            keep = np.nonzero(gap > t.min_edge)[0]
            base = len(self.targets)
            self.targets += q[keep].tolist()
            parts.append((m.index, agents[keep], gap[keep],
                          np.arange(base, base + len(keep)) + 1))
        return self._batch(parts, len(self.topics))

    def _subjective(self, world, r: int, i: int, ti: int, agents: np.ndarray) -> np.ndarray:
        m = self.books.markets[i]
        noise = self.rng.normal(r, Purpose.MARKET + 100 * self.code + 1000 * i, agents)[:, 0]
        return subjective(world.beliefs.position[agents, ti],
                          world.beliefs.confidence[agents, ti],
                          np.asarray(m.cfg.anchors()), self.cfg.trading, noise,
                          self.sentiment.get(i), self.cfg.bridge.social_to_market.weight)

    def _batch(self, parts: list, n_topics: int) -> ActionBatch:
        """One row per order, at most `max_actions_per_round` per trader (largest gap
        first), slots numbered in that order."""
        if not parts:
            return ActionBatch.empty(n_topics)
        agent = np.concatenate([a for _, a, _, _ in parts])
        market = np.concatenate([np.full(len(a), i, np.int16) for i, a, _, _ in parts])
        gap = np.concatenate([g for _, _, g, _ in parts])
        ref = np.concatenate([o for _, _, _, o in parts])
        order = np.lexsort((market, -gap, agent))
        agent, market, ref = agent[order], market[order], ref[order]
        first = np.r_[True, agent[1:] != agent[:-1]] if len(agent) else np.zeros(0, bool)
        start = np.maximum.accumulate(np.where(first, np.arange(len(agent)), 0))
        slot = np.arange(len(agent)) - start
        keep = slot < self.cfg.max_actions_per_round
        n = int(keep.sum())
        return ActionBatch(
            agent=agent[keep].astype(np.int32), platform=np.full(n, self.code, np.int8),
            action=np.full(n, ActionType.BUY, np.int8), target_post=np.full(n, -1, np.int64),
            target_agent=np.full(n, -1, np.int32), stance=np.full((n, n_topics), np.nan),
            text=[""] * n, slot=slot[keep].astype(np.int8),
            meta={"market": market[keep], "order": ref[keep].astype(np.int64)})

    def apply(self, world, r: int, actions: ActionBatch) -> np.ndarray:
        """Apply this platform's rows (canonical order): a rule trader's order becomes its
        trade at the current price (its row then says what it did); an LLM trader's trade
        applies as asked. Returns the reason code of each row."""
        n = len(actions)
        reason = np.zeros(n, np.int8)
        meta = actions.meta
        market = meta.get("market", np.full(n, -1, np.int16)).astype(np.int64)
        outcome = meta.get("outcome", np.full(n, -1, np.int8)).astype(np.int64)
        amount = meta.get("amount", np.full(n, np.nan)).astype(np.float64)
        ref = meta.get("order", np.zeros(n, np.int64))
        source = meta.get("source", np.zeros(n, np.int8))
        open_ = max(sum(m.is_open(r) and m.cfg.topic is not None for m in self.books.markets), 1)
        b = self.books
        # Python scalars for the loop (numpy's per-element access costs more than the math).
        agents, acts = actions.agent.tolist(), actions.action.tolist()
        ref, market, outcome, amount = ref.tolist(), market.tolist(), outcome.tolist(), \
            amount.tolist()
        for i in range(n):
            agent, act, limit = agents[i], acts[i], float("nan")
            if ref[i] > 0:  # a rule trader's order: side and size at the current price
                m = b.markets[market[i]]
                decided = order(self.targets[ref[i] - 1],
                                [m.maker.price(k) for k in range(m.maker.n)],
                                float(b.cash[agent]), b.shares[m.index][agent].tolist(),
                                self.cfg.trading, open_)
                if decided is None:
                    reason[i] = Reason.PRICE_LIMIT
                    continue
                act, outcome[i], amount[i], limit = decided
                actions.action[i] = act
            if act == ActionType.DO_NOTHING:
                continue
            if act not in (ActionType.BUY, ActionType.SELL):
                reason[i] = Reason.NOT_ALLOWED
                continue
            args = (agent, act, market[i], outcome[i], float(amount[i]))
            why = b.check(r, *args, limit)
            reason[i] = why
            if why == Reason.OK:
                self.trades.append(b.trade(*args, int(source[i]), limit))
        return reason

    def end_round(self, world, r: int, shown: np.ndarray) -> None:
        """The social digest of the round (`shown`: the post ids of every feed item
        shown in it), moves of the round, forecasts of markets closing now, resolutions
        due."""
        self.digest(world, r, shown)
        self.positions = self._positions_table(r)  # holdings after the trades, before payouts
        self.volume = {m.index: sum(t.cash for t in self.trades if t.market == m.index)
                       for m in self.books.markets}
        for m in self.books.markets:
            p = m.maker.prices()
            m.prices_before = self.opened_prices[m.index]
            if m.resolved is None:
                self.moves[m.index] = float(np.abs(p - self.opened_prices[m.index]).max())
            m.last_prices = p
            if r == m.closes and m.resolved is None:
                self._forecasts(world, r, m.index)
            res = m.cfg.resolution
            if res is not None and m.resolved is None and r == (res.round or m.closes):
                self._resolve(world, r, m.index)
        if self.cfg.bridge.market_to_social.enabled and self.cfg.bridge.market_to_social.context:
            for m in self.books.markets:
                if m.cfg.opens <= r + 1 and m.resolved is None:
                    self.bridge.append({"direction": "market_to_social", "market": m.index,
                                        "kind": "context", "value": float(m.last_prices[0]),
                                        "post_ids": [], "detail": "Markets section"})

    def _forecasts(self, world, r: int, i: int) -> None:
        """Every trader's forecast when the market closes: the subjective probabilities
        of the rule mapping, without the round's noise (docs/markets.md, "Scores")."""
        m = self.books.markets[i]
        agents = np.nonzero(self.books.members & world.alive)[0]
        ti = self._topic(m.cfg)
        if ti is None or not len(agents):
            return
        q = subjective(world.beliefs.position[agents, ti], world.beliefs.confidence[agents, ti],
                       np.asarray(m.cfg.anchors()), self.cfg.trading,
                       np.zeros(len(agents)), self.sentiment.get(i),
                       self.cfg.bridge.social_to_market.weight)
        self.forecasts.append({"market": i, "agents": agents, "q": q,
                               "price": m.maker.prices()})

    def _resolve(self, world, r: int, i: int) -> None:
        m = self.books.markets[i]
        res = m.cfg.resolution
        names = m.outcomes
        if res.outcome is not None:
            outcome, value = names.index(res.outcome), float("nan")
        else:
            rule = res.rule
            x = world.beliefs.position[world.alive, self.topics.index(rule.topic)]
            value = float(x.mean()) if rule.metric == "mean_position" else float((x > 0).mean())
            hit = {">": value > rule.value, ">=": value >= rule.value,
                   "<": value < rule.value, "<=": value <= rule.value}[rule.op]
            pick = (rule.if_true or names[0]) if hit else (rule.if_false or names[1])
            outcome = names.index(pick)
        paid = self.books.resolve(i, outcome, r)
        self.payouts.append({"market": i, "outcome": outcome, "value": value, **paid})

    # ---------------------------------------------------------------- context

    def context_sections(self, world, agent: int, r: int, platform: str, specs: dict
                         ) -> list[Section]:
        """The "Markets" section: on a social platform (market → social) the prices; on
        the market itself, the observation of an LLM trader: prices, its account, what
        to do, and (social → market) what people said. In the agent's language."""
        prices = section_spec(specs, "markets")
        priority, limit = prices.priority, prices.max_tokens
        t = templates(world.population.language_of(agent))
        if platform != NAME:
            m2s = self.cfg.bridge.market_to_social
            if not (m2s.enabled and m2s.context):
                return []
            lines = [self._price_line(m, r, t) for m in self.books.markets
                     if m.cfg.opens <= r and m.resolved is None]
            if not lines:
                return []
            return [Section("markets", t("market.title"), priority, limit, lines,
                            intro=t("market.intro"))]
        said = section_spec(specs, "market_digest")
        return self._trader_sections(world, agent, r, priority, limit, said, t)

    def _price_line(self, m, r: int, t: Templates) -> Line:
        p = m.maker.prices()
        move = p - m.prices_before if m.prices_before is not None else np.zeros_like(p)
        parts = t("language.sep").join(
            t("market.price", outcome=o, price=f"{p[k]:.0%}",
              move=t("market.move", points=f"{100 * move[k]:+.0f}")
              if abs(move[k]) >= 0.005 else "")
            for k, o in enumerate(m.outcomes))
        volume = self.volume.get(m.index, 0.0)
        traded = t("market.traded", volume=f"{volume:,.0f}") if volume else ""
        return Line(t("market.line", question=quote(m.cfg.question, 160), id=m.cfg.id,
                      prices=parts, traded=traded),
                    {"kind": "market", "market": m.cfg.id, "round": r - 1})

    def _trader_sections(self, world, agent: int, r: int, priority: int, limit: int,
                         said: SectionSpec, t: Templates) -> list[Section]:
        b = self.books
        sep = t("language.sep")
        lines = []
        for m in b.markets:
            if not m.is_open(r):
                continue
            line = self._price_line(m, r, t)
            held = b.shares[m.index][agent]
            owned = sep.join(t("market.shares", n=f"{held[k]:.2f}", outcome=o)
                             for k, o in enumerate(m.outcomes) if held[k] > 0)
            lines.append(Line(line.text + (t("market.hold", shares=owned) if owned else ""),
                              line.provenance))
        outcomes = sep.join(m.cfg.id + " " + "/".join(m.outcomes) for m in b.markets
                            if m.is_open(r))
        account = [Line(t("market.account", cash=f"{b.cash[agent]:.2f}", outcomes=outcomes))]
        out = [Section("markets", t("market.title_round", round=r), priority, limit,
                       lines + account, part="observation",
                       intro="" if lines else t("market.closed"))]
        if self.cfg.bridge.social_to_market.enabled:
            talk = []
            for m in b.markets:
                s = self.sentiment.get(m.index)
                if s is None or not m.is_open(r):
                    continue
                talk.append(Line(t("market.talk.line", topic=m.cfg.topic, id=m.cfg.id,
                                   stance=f"{s:+.2f}"),
                                 {"kind": "digest", "market": m.cfg.id, "round": r - 1}))
                for pid in self.digest_posts.get(m.index, []):
                    talk.append(Line(t("market.talk.post", post=pid,
                                       text=quote(world.posts.text[pid], 200)),
                                     {"kind": "observed", "post": pid, "round": r - 1}))
            out.append(Section("market_digest", t("market.talk.title"), said.priority,
                               said.max_tokens,
                               talk, part="observation",
                               intro="" if talk else t("market.talk.empty")))
        return out

    # ---------------------------------------------------------------- tables

    def tables(self, world, r: int) -> dict[str, pa.Table]:
        """The round's rows of the market tables (round 0: the markets and their prices)."""
        b = self.books
        out = {"prices": self._prices_table(r), "trades": self._trades_table(r),
               "positions": self.positions, "market_bridge": self._bridge_table(r),
               "market_books": self._books_table(r)}
        if r == 0:
            out["markets"] = pa.table({
                "round": pa.array([0] * len(b.markets), pa.int32()),
                "market": [m.cfg.id for m in b.markets],
                "question": [m.cfg.question for m in b.markets],
                "topic": [m.cfg.topic for m in b.markets],
                "outcomes": [m.outcomes for m in b.markets],
                "maker": [m.cfg.maker.model_dump_json() for m in b.markets],
                "opens": pa.array([m.cfg.opens for m in b.markets], pa.int32()),
                "closes": pa.array([m.closes for m in b.markets], pa.int32()),
                "resolution": [m.cfg.resolution.model_dump_json() if m.cfg.resolution
                               else None for m in b.markets],
                "worst_case_loss": [m.maker.worst_case_loss() for m in b.markets]})
        if self.payouts or r == 0:
            out["payouts"] = self._payouts_table(r)
        if self.forecasts or r == 0:
            out["forecasts"] = self._forecasts_table(r)
        return out

    def _ids(self, idx) -> list[str]:
        return [self.books.markets[int(i)].cfg.id for i in idx]

    def _prices_table(self, r: int) -> pa.Table:
        rows = {"round": [], "market": [], "outcome": [], "price": [], "volume": [],
                "n_trades": []}
        for m in self.books.markets:
            mine = [t for t in self.trades if t.market == m.index]
            for k, o in enumerate(m.outcomes):
                on = [t for t in mine if t.outcome == k]
                rows["round"].append(r)
                rows["market"].append(m.cfg.id)
                rows["outcome"].append(o)
                rows["price"].append(float(m.maker.prices()[k]))
                rows["volume"].append(float(sum(t.cash for t in on)))
                rows["n_trades"].append(len(on))
        return pa.table({**rows, "round": pa.array(rows["round"], pa.int32()),
                         "n_trades": pa.array(rows["n_trades"], pa.int32())})

    def _trades_table(self, r: int) -> pa.Table:
        t = self.trades
        outcomes = [self.books.markets[x.market].outcomes[x.outcome] for x in t]
        return pa.table({
            "round": pa.array([r] * len(t), pa.int32()), "market": self._ids(x.market for x in t),
            "agent": pa.array([x.agent for x in t], pa.int32()),
            "side": [x.side for x in t], "outcome": outcomes,
            "cash": pa.array([x.cash for x in t], pa.float64()),
            "shares": pa.array([x.shares for x in t], pa.float64()),
            "price_before": pa.array([x.price_before for x in t], pa.float64()),
            "price_after": pa.array([x.price_after for x in t], pa.float64()),
            "source": pa.array([x.source for x in t], pa.int8())})

    def _positions_table(self, r: int) -> pa.Table:
        """Holdings after the round's trades (before any payout) of every (trader, market)
        that traded in it: one row per outcome."""
        b = self.books
        pairs = np.unique(np.array([(x.market, x.agent) for x in self.trades],
                                   np.int64).reshape(-1, 2), axis=0)
        cols: dict[str, list] = {k: [] for k in ("market", "agent", "outcome", "shares",
                                                 "cost", "cash", "realised")}
        for i in np.unique(pairs[:, 0]).tolist():
            agents = pairs[pairs[:, 0] == i, 1]
            outcomes = b.markets[i].outcomes
            k = len(outcomes)
            cols["market"] += [b.markets[i].cfg.id] * (len(agents) * k)
            cols["agent"] += np.repeat(agents, k).tolist()
            cols["outcome"] += outcomes * len(agents)
            cols["shares"] += b.shares[i][agents].ravel().tolist()
            cols["cost"] += b.cost[i][agents].ravel().tolist()
            cols["cash"] += np.repeat(b.cash[agents], k).tolist()
            cols["realised"] += np.repeat(b.realised[agents], k).tolist()
        return pa.table({"round": pa.array([r] * len(cols["agent"]), pa.int32()),
                         "market": pa.array(cols["market"], pa.string()),
                         "agent": pa.array(cols["agent"], pa.int32()),
                         "outcome": pa.array(cols["outcome"], pa.string()),
                         **{k: pa.array(cols[k], pa.float64())
                            for k in ("shares", "cost", "cash", "realised")}})

    def _bridge_table(self, r: int) -> pa.Table:
        rows = self.bridge
        return pa.table({
            "round": pa.array([r] * len(rows), pa.int32()),
            "direction": [x["direction"] for x in rows],
            "market": self._ids(x["market"] for x in rows),
            "kind": [x["kind"] for x in rows],
            "value": pa.array([x["value"] for x in rows], pa.float64()),
            "post_ids": pa.array([x["post_ids"] for x in rows], pa.list_(pa.int64())),
            "detail": [x["detail"] for x in rows]})

    def _books_table(self, r: int) -> pa.Table:
        b = self.books
        check = b.check_conservation()
        return pa.table({
            "round": pa.array([r], pa.int32()),
            "traders": pa.array([int(b.members.sum())], pa.int32()),
            "cash": [float(b.cash.sum())],
            "maker_cash": [float(sum(m.maker.collected for m in b.markets))],
            "paid_out": [b.paid_out],
            "cash_imbalance": [check["cash"]], "share_imbalance": [check["shares"]]})

    def _payouts_table(self, r: int) -> pa.Table:
        cols = {k: [] for k in ("market", "agent", "outcome", "payout", "rule_value")}
        for p in self.payouts:  # the maker's row first (agent −1: every payout it made)
            n = len(p["agent"]) + 1
            cols["market"] += [self.books.markets[p["market"]].cfg.id] * n
            cols["agent"] += [-1, *p["agent"].tolist()]
            cols["outcome"] += [self.books.markets[p["market"]].outcomes[p["outcome"]]] * n
            cols["payout"] += [float(p["payout"].sum()), *p["payout"].tolist()]
            cols["rule_value"] += [p["value"]] * n
        return pa.table({"round": pa.array([r] * len(cols["agent"]), pa.int32()),
                         "market": pa.array(cols["market"], pa.string()),
                         "agent": pa.array(cols["agent"], pa.int32()),
                         "outcome": pa.array(cols["outcome"], pa.string()),
                         "payout": pa.array(cols["payout"], pa.float64()),
                         "rule_value": pa.array(cols["rule_value"], pa.float64())})

    def _forecasts_table(self, r: int) -> pa.Table:
        """At a market's close: each trader's probability per outcome, and the market's
        own (agent −1: the price)."""
        cols = {k: [] for k in ("market", "agent", "outcome", "probability")}
        for f in self.forecasts:
            m = self.books.markets[f["market"]]
            k = len(m.outcomes)
            agents = np.concatenate([[-1], f["agents"]])
            probs = np.vstack([f["price"][None, :], f["q"]])
            cols["market"] += [m.cfg.id] * (len(agents) * k)
            cols["agent"] += np.repeat(agents, k).tolist()
            cols["outcome"] += m.outcomes * len(agents)
            cols["probability"] += probs.ravel().tolist()
        return pa.table({"round": pa.array([r] * len(cols["agent"]), pa.int32()),
                         "market": pa.array(cols["market"], pa.string()),
                         "agent": pa.array(cols["agent"], pa.int32()),
                         "outcome": pa.array(cols["outcome"], pa.string()),
                         "probability": pa.array(cols["probability"], pa.float64())})

    # ---------------------------------------------------------------- state

    def get_state(self) -> State:
        """The books, and what the next round's bridge needs (moves, digested posts)."""
        s = self.books.get_state()
        s.meta["engine"] = {"moves": {str(k): v for k, v in self.moves.items()},
                            "volume": {str(k): v for k, v in self.volume.items()},
                            "sentiment": {str(k): v for k, v in self.sentiment.items()},
                            "digest_posts": {str(k): v for k, v in self.digest_posts.items()}}
        for m in self.books.markets:
            if m.prices_before is not None:
                s.arrays[f"prices_before.{m.index}"] = m.prices_before.copy()
        return s

    def set_state(self, state: State) -> None:
        """Take a state `get_state` returned."""
        self.books.set_state(state)
        e = state.meta["engine"]
        self.moves = {int(k): float(v) for k, v in e["moves"].items()}
        self.volume = {int(k): float(v) for k, v in e.get("volume", {}).items()}
        self.sentiment = {int(k): float(v) for k, v in e["sentiment"].items()}
        self.digest_posts = {int(k): list(v) for k, v in e["digest_posts"].items()}
        for m in self.books.markets:
            key = f"prices_before.{m.index}"
            m.prices_before = (state.arrays[key].astype(np.float64) if key in state.arrays
                               else None)
