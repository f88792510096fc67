"""Short post texts for rule-based agents that state their stance in words.

LLM agents will read these, so the wording follows the stance labels (beliefs/render uses
the same bins) and the exact stance travels with the post as data.
"""

from __future__ import annotations

STANCE_BINS = (
    (0.6, "strongly support"),
    (0.2, "support"),
    (-0.2, "am undecided about"),
    (-0.6, "oppose"),
    (-2.0, "strongly oppose"),
)

_OPENERS = ("", "Honestly, ", "Let me be clear: ", "Thinking about it more, ", "For the record, ",
            "Hot take: ", "After reading the news today, ")
_REASONS = {
    1: ("The benefits clearly outweigh the costs.", "It is long overdue.",
        "The evidence keeps pointing the same way.", "It will help people like me.",
        "We should have done this years ago."),
    0: ("I need to see more evidence before I decide.", "Both sides have a point.",
        "It depends on the details.", "I'm still reading up on it."),
    -1: ("The costs fall on the wrong people.", "It is a bad idea, plain and simple.",
         "The evidence does not support it.", "It will hurt people like me.",
         "Nobody asked the people who pay for it."),
}


def stance_verb(position: float) -> str:
    """'strongly support' … 'strongly oppose' for a position in [-1, 1]."""
    for bound, verb in STANCE_BINS:
        if position >= bound:
            return verb
    return STANCE_BINS[-1][1]


def _sign(position: float) -> int:
    return 1 if position >= 0.2 else (-1 if position <= -0.2 else 0)


def _pick(options: tuple[str, ...], u: float) -> str:
    return options[min(int(u * len(options)), len(options) - 1)]


def statement(label: str, position: float, u: float) -> str:
    """One sentence with the stance in words plus a reason, e.g.
    'I strongly support the carbon tax. It is long overdue.'"""
    return f"I {stance_verb(position)} {label}. {_pick(_REASONS[_sign(position)], u)}"


def compose_post(labels: list[str], positions: list[float], u: list[float]) -> str:
    """A new post about one or more topics."""
    opener = _pick(_OPENERS, u[0])
    body = " ".join(statement(lab, pos, uu) for lab, pos, uu in zip(labels, positions, u[1:],
                                                                       strict=False))
    text = opener + body
    return text[0].upper() + text[1:]


def compose_response(kind: str, target_user: str, agree: bool, labels: list[str],
                     positions: list[float], u: list[float]) -> str:
    """A reply, quote or comment reacting to someone else's post."""
    body = " ".join(statement(lab, pos, uu) for lab, pos, uu in zip(labels, positions, u[1:],
                                                                       strict=False))
    if kind == "quote":
        lead = "Exactly this." if agree else "Not convinced by this."
        return f"{lead} {body}"
    lead = "I agree." if agree else "I disagree."
    if kind == "reply":
        return f"@{target_user} {lead} {body}"
    return f"{lead} {body}"
