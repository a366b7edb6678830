"""Check that the masks ict's verl plug-in applied in a real verl run are ict's own selection.

Reads the records ``examples/verl/ict_mask_dump.py`` wrote during ``examples/verl/run_cpu.sh``
(one per selection: the statistics the plug-in computed from verl's logits and the mask it handed
to verl's loss), recomputes the selection with :func:`ict.core.selectors.select` from those
statistics alone (the selector spec parsed by :func:`ict.integrations.parse_token_selector`,
groups from verl's uids, ties at the threshold drawn with the recorded generator seed, as the
plug-in's ``selection_seed`` gives it), and compares masks element by element. Also reports each record's
selected fraction and ict's paper diagnostics (:func:`ict.core.diagnostics.token_diagnostics`).

    python examples/verl/check_masks.py runs/verl-cpu/ict/ict_masks [--json out.json]

Exit status 0 when every recomputed mask equals the applied one (and at least one record was
checked), 1 otherwise. Needs only ict and torch (not verl).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from ict.core.diagnostics import token_diagnostics
from ict.core.selectors import SelectionInputs, select
from ict.core.stats import TokenStatistics
from ict.integrations import parse_token_selector


def _padded(tensor: torch.Tensor, length: int) -> torch.Tensor:
    return torch.nn.functional.pad(tensor, (0, length - tensor.shape[1]))


def _cat(parts: list[dict[str, Any]], field: str, length: int) -> torch.Tensor:
    return torch.cat([_padded(part[field], length) for part in parts])


def check_record(record: dict[str, Any]) -> dict[str, Any]:
    """Recompute one dumped selection; the comparison and the step's diagnostics."""
    parts = record["parts"]
    length = max(part["response_mask"].shape[1] for part in parts)
    references = list(parts[0]["js_scores"])
    stats = TokenStatistics(
        _cat(parts, "log_probs", length), _cat(parts, "entropy", length), _cat(parts, "renyi2", length),
        {ref: torch.cat([_padded(part["js_scores"][ref], length) for part in parts]) for ref in references})
    response_mask = _cat(parts, "response_mask", length).bool()
    advantages = _cat(parts, "advantages", length)
    uids = [uid for part in parts for uid in part["uids"]]
    index: dict[str, int] = {}
    group_ids = torch.tensor([index.setdefault(uid, len(index)) for uid in uids])
    name, options = parse_token_selector(record["selector"])
    inputs = SelectionInputs(
        stats=stats, response_mask=response_mask, advantages=advantages,
        token_ids=_cat(parts, "token_ids", length),
        generator=torch.Generator().manual_seed(int(record["generator_seed"])),
        group_ids=group_ids, old_log_probs=_cat(parts, "old_log_probs", length),
        clip_range=tuple(record["clip_range"]))
    selection = select("all" if record["warmup"] else name, inputs, **options)
    expected = selection.mask
    applied = torch.cat([_padded(mask.to(torch.uint8), length) for mask in record["masks"]]).bool()
    differing = int((expected != applied).sum())
    per_row = advantages.masked_fill(~response_mask, 0).sum(1) / response_mask.sum(1).clamp(min=1)
    diagnostics = token_diagnostics(stats, response_mask, applied, per_row)
    tokens = int(response_mask.sum())
    return {
        "step": record["step"], "selector": record["selector"], "warmup": record["warmup"],
        "rows": len(uids), "groups": len(index), "response_tokens": tokens,
        "selected_tokens": int(applied.sum()),
        "selected_fraction": int(applied.sum()) / max(tokens, 1),
        "tie_decided_tokens": int(selection.tie_decided.sum()),
        "tie_drawing_rows": int(selection.tie_decided.any(dim=-1).sum()),  # sequences whose ties drew
        "differing_tokens": differing, "equal": differing == 0,
        "diagnostics": {key: (None if isinstance(value, float) and math.isnan(value) else value)
                        for key, value in diagnostics.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """Check every record in the directory; print one line each and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="ICT_VERL_DUMP_DIR of the run")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    files = sorted(args.directory.glob("select_*.pt"))
    results = []
    for path in files:
        result = check_record(torch.load(path, weights_only=False))
        result["file"] = path.name
        results.append(result)
        print(f"{path.name}: step {result['step']} {result['selector']}"
              f"{' (warm-up)' if result['warmup'] else ''}: {result['selected_tokens']}/"
              f"{result['response_tokens']} tokens selected ({result['selected_fraction']:.3f}; "
              f"{result['tie_decided_tokens']} decided by a tie, in {result['tie_drawing_rows']} of "
              f"{result['rows']} sequences), "
              f"{result['differing_tokens']} differ from ict.core.selectors -> "
              f"{'EQUAL' if result['equal'] else 'DIFFERENT'}")
    ok = bool(results) and all(result["equal"] for result in results)
    summary = {"records": len(results), "all_equal": ok, "results": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{len(results)} records, masks {'all equal' if ok else 'NOT all equal'}"
          + ("" if results else f" (no select_*.pt in {args.directory})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
