"""Surveys, in one place: a questionnaire asked of a panel of agents at chosen rounds
(docs/surveys.md).

    config.py     the `surveys:` section: panels, waves, items (the config layer)
    responses.py  the rule agents' answers during the run, and the panel's sample (engine)
    asking.py     `shoal survey`: the LLM respondents, through the interview path (runs)
    scores.py     scale scores, Cronbach's alpha, abstention, change between waves (analysis)

Each module sits in the layer its part belongs to (docs/architecture.md), so this package
imports none of them: import the one you need.
"""
