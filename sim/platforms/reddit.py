"""The forum: threads with comments, up- and downvotes, a hot list; follows."""

from __future__ import annotations

from pydantic import Field

from shoal.config.base import part
from shoal.config.platforms import PlatformConfig
from shoal.core.posts import PostKind
from shoal.core.registry import RECOMMENDERS
from shoal.core.vocabulary import ActionType as A
from shoal.platforms.spec import PlatformSpec, register


class RedditConfig(PlatformConfig):
    """The forum's settings (defaults: the hot list, Reddit's hot score)."""

    recommender: part(RECOMMENDERS) = Field(default="popularity", validate_default=True)


REDDIT = register(PlatformSpec(
    name="reddit", code=1, label="Reddit",
    actions=(A.POST, A.COMMENT, A.UPVOTE, A.DOWNVOTE, A.FOLLOW, A.DO_NOTHING),
    engagements=(A.UPVOTE, A.DOWNVOTE, A.COMMENT, A.FOLLOW),
    feed_kinds=(PostKind.POST,),  # comments hang off their thread
    action_help=("post (start a thread)", "comment (comment on a post)", "upvote",
                 "downvote", "follow (follow its author)", "do_nothing"),
    votes_as_score=True,
    enabled_by_default=True,
), RedditConfig)
