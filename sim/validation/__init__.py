"""Validation against the real world: registered cases, each a scenario, its data, a
measure, a published or observed target with its source, a tolerance and a verdict
(`shoal validate`, docs/validation.md).

A case is a class registered in `CASES` (plug-ins register theirs through the
`shoal.plugins` entry point, as for every other part):

    from shoal.validation import CASES, Case, CaseContext, CaseResult, Check

    @CASES.register("my_case")
    class MyCase(Case):
        title = "..."
        source = "Author et al. (year), Journal"
        def run(self, ctx: CaseContext) -> CaseResult: ...
"""

from shoal.validation.case import (
    CASES,
    Case,
    CaseContext,
    CaseResult,
    Check,
    mean_interval,
)

__all__ = ["CASES", "Case", "CaseContext", "CaseResult", "Check", "mean_interval"]
