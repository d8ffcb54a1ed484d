"""What the large-batch rules checker (``rules_check``) answers: its questions, one per check, and its report
(``RulesCheckReport``: the verdicts as text and as HTML, with the table of each layer's local LR after LARS's
first step, the engine's beside the participant's)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from coursekit.labs.kit.script_check import FAIL, PASS, VERDICT_COLORS, Check, CheckReport

CHECK_QUESTIONS = {
    "run": "the file loads",
    "scaling": "scaled_lr follows the linear scaling rule",
    "warmup": "warmup_then_decay gives the engine's factor at every step",
    "scheduler": "warmup_scheduler sets the engine's learning rate at every step",
    "lars": "LARS gives the engine's weights and each layer's local LR",
}


@dataclass(repr=False)  # repr: CheckReport's text table, and the table of local LRs
class RulesCheckReport(CheckReport):
    """The verdicts, and what was measured (for the notebook to show)."""

    path: str
    checks: list[Check]
    seconds: float = 0.0
    trust_ratios: list[dict[str, Any]] = field(default_factory=list)  # one row per layer: engine's and yours
    max_abs_diff: float | None = None  # LARS: max |w_yours - w_engine| over the steps
    questions = CHECK_QUESTIONS

    def headline(self) -> str:
        return f"large-batch rules in {self.path}, compared with the training engine: {self.summary()}"

    def ratio_lines(self) -> list[str]:
        if not self.trust_ratios:
            return []
        lines = [f"  {'layer':<12} {'group':<10} {'||w||':>8} {'||g||':>8} {'engine':>10} {'yours':>10}"]
        for row in self.trust_ratios:
            mark = "" if row["same"] else "  <- differs"
            lines.append(f"  {row['layer']:<12} {row['group']:<10} {row['w_norm']:>8.4f} {row['g_norm']:>8.4f} "
                         f"{_fmt(row['engine']):>10} {_fmt(row['yours']):>10}{mark}")
        return lines

    def __str__(self) -> str:
        lines = [self.headline(), *self.check_lines()]
        if self.trust_ratios:
            lines += ["local LR of each layer after LARS's first step:", *self.ratio_lines()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        page = super()._repr_html_()
        if self.trust_ratios:
            ratio_rows = "".join(
                f"<tr><td style='text-align:left'>{html.escape(r['layer'])}</td><td>{html.escape(r['group'])}</td>"
                f"<td>{r['w_norm']:.4f}</td><td>{r['g_norm']:.4f}</td><td>{_fmt(r['engine'])}</td>"
                f"<td style='color:{VERDICT_COLORS[PASS if r['same'] else FAIL]}'>{_fmt(r['yours'])}</td></tr>"
                for r in self.trust_ratios)
            page += ("<p>local LR of each layer after LARS's first step</p><table><thead><tr><th>layer</th>"
                     "<th>group</th><th>||w||</th><th>||g||</th><th>engine</th><th>yours</th></tr></thead>"
                     f"<tbody>{ratio_rows}</tbody></table>")
        return page


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4g}"
