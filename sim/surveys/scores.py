"""Survey results (`survey_responses`, docs/surveys.md): scale scores, Cronbach's alpha,
abstention, and within-respondent change between waves. Plain functions of frames and the
config's `surveys` section (as a list of dicts, as `Run.config` gives it)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd

from shoal.analysis.metrics import TEXT, t_interval

# The columns of each result and their dtypes, so that a result without rows (a run without
# surveys, a scale nobody completed) has them too, not columns of `object`.
SCORES = {"survey": TEXT, "scale": TEXT, "wave": "int32", "round": "int32", "agent": "int32",
          "score": float}
SCALES = {"survey": TEXT, "scale": TEXT, "wave": "int64", "round": "int64", "n": "int64",
          "mean": float, "sd": float, "alpha": float, "items": "int64", "note": TEXT}
CHANGE = {"survey": TEXT, "scale": TEXT, "from_wave": "int64", "to_wave": "int64",
          "n": "int64", "mean_change": float, "ci_low": float, "ci_high": float,
          "note": TEXT}


def _frame(rows: list[dict], dtypes: dict) -> pd.DataFrame:
    """`rows` as a frame with exactly the columns and dtypes of `dtypes`."""
    return pd.DataFrame(rows, columns=list(dtypes)).astype(dtypes)


def _items(surveys: list[dict]) -> pd.DataFrame:
    """One row per Likert item of a scale: survey, item, scale, points, reverse."""
    rows = [{"survey": s["name"], "item": it["id"], "scale": it.get("scale"),
             "points": int(it.get("points", 5)), "reverse": bool(it.get("reverse"))}
            for s in surveys for it in s.get("items", [])
            if it.get("kind") == "likert" and it.get("scale")]
    return pd.DataFrame(rows, columns=["survey", "item", "scale", "points", "reverse"])


def coded(responses: pd.DataFrame, surveys: list[dict]) -> pd.DataFrame:
    """The scale items' answers, reverse-coded (points + 1 − answer) where the item says
    so, abstentions dropped: survey, wave, round, agent, scale, item, value."""
    items = _items(surveys)
    df = responses[~responses["abstained"].astype(bool)].merge(items, on=["survey", "item"])
    value = np.where(df["reverse"], df["points"] + 1 - df["value"], df["value"])
    return df.assign(value=value)[["survey", "wave", "round", "agent", "scale", "item",
                                   "value"]]


def cronbach_alpha(wide: pd.DataFrame) -> float:
    """Cronbach's alpha of a respondents × items frame (complete rows only):
    k/(k−1) · (1 − Σ var(item) / var(sum)), variances with n − 1. NaN for fewer than two
    items or respondents, or a sum without variance."""
    wide = wide.dropna()
    k, n = wide.shape[1], wide.shape[0]
    if k < 2 or n < 2:
        return float("nan")
    total = wide.sum(axis=1).var(ddof=1)
    if total == 0:
        return float("nan")
    return float(k / (k - 1) * (1 - wide.var(ddof=1).sum() / total))


def scale_scores(responses: pd.DataFrame, surveys: list[dict]) -> pd.DataFrame:
    """Per respondent, wave and scale: the mean of the (reverse-coded) items, for those
    who answered every item of the scale (listwise)."""
    df = coded(responses, surveys)
    items = _items(surveys)
    size = items.groupby(["survey", "scale"]).size().rename("k")
    wide = df.pivot_table(index=["survey", "scale", "wave", "round", "agent"],
                          columns="item", values="value")
    out = []
    for (survey, scale), part in wide.groupby(level=["survey", "scale"]):
        mine = items[(items["survey"] == survey) & (items["scale"] == scale)]["item"]
        part = part.reindex(columns=list(mine)).dropna()  # (an item nobody answered: NaN)
        if len(mine) != size[(survey, scale)] or part.empty:
            continue
        out.append(part.mean(axis=1).rename("score").reset_index())
    if not out:
        return _frame([], SCORES)
    return pd.concat(out, ignore_index=True)[list(SCORES)].astype(SCORES)


def alpha_note(n: int, items: int, alpha: float) -> str:
    """Why Cronbach's alpha is undefined, in words ("" when it is not)."""
    if items < 2:
        return "alpha n/a (one item)"
    if n < 2:
        return f"alpha n/a (n = {n})"
    return "alpha n/a (no variance)" if np.isnan(alpha) else ""


def scale_summary(responses: pd.DataFrame, surveys: list[dict]) -> pd.DataFrame:
    """Per survey, scale and wave: respondents with a score, mean and sd of the score,
    Cronbach's alpha over the scale's items (all of them, an item nobody answered
    included: alpha, like the score, is over the respondents who answered every item), and
    a `note` saying why a statistic is undefined (NaN): alpha from fewer than two complete
    respondents or items, or without variance; sd from one respondent."""
    df = coded(responses, surveys)
    scores = scale_scores(responses, surveys)
    items = _items(surveys)
    rows = []
    for (survey, scale, wave), part in df.groupby(["survey", "scale", "wave"]):
        mine = items[(items["survey"] == survey) & (items["scale"] == scale)]["item"]
        wide = part.pivot_table(index="agent", columns="item", values="value") \
            .reindex(columns=list(mine))
        sc = scores[(scores["survey"] == survey) & (scores["scale"] == scale)
                    & (scores["wave"] == wave)]["score"]
        alpha = cronbach_alpha(wide)
        complete = len(wide.dropna())
        notes = [alpha_note(complete, wide.shape[1], alpha),
                 f"sd n/a (n = {len(sc)})" if len(sc) < 2 else ""]
        rows.append({"survey": survey, "scale": scale, "wave": int(wave),
                     "round": int(part["round"].iloc[0]), "n": len(sc),
                     "mean": sc.mean(), "sd": sc.std(ddof=1), "alpha": alpha,
                     "items": wide.shape[1], "note": "; ".join(n for n in notes if n)})
    return _frame(rows, SCALES)


def abstention(responses: pd.DataFrame) -> pd.DataFrame:
    """Per survey, wave and item: asked, abstained, and the abstention rate."""
    g = responses.groupby(["survey", "wave", "round", "item"], sort=True)["abstained"]
    out = g.agg(asked="size", abstained="sum").reset_index()
    return out.assign(rate=out["abstained"] / out["asked"])


def wave_change(responses: pd.DataFrame, surveys: list[dict],
                confidence: float = 0.95) -> pd.DataFrame:
    """Within-respondent change of each scale score between consecutive waves: the
    respondents scored in both, their mean change and its t interval (NaN from fewer than
    two respondents, and `note` says so)."""
    scores = scale_scores(responses, surveys)
    rows = []
    for (survey, scale), part in scores.groupby(["survey", "scale"]):
        wide = part.pivot_table(index="agent", columns="wave", values="score")
        waves = sorted(wide.columns)
        for a, b in pairwise(waves):
            diff = (wide[b] - wide[a]).dropna()
            low, high = t_interval(diff.to_numpy(), confidence)
            rows.append({"survey": survey, "scale": scale, "from_wave": int(a),
                         "to_wave": int(b), "n": len(diff), "mean_change": diff.mean(),
                         "ci_low": low, "ci_high": high,
                         "note": f"interval n/a (n = {len(diff)})" if len(diff) < 2 else ""})
    return _frame(rows, CHANGE)
