"""results.json of `bot optimize --strategy search` -> the markdown table of docs/results-h200.md.

    python3 ci/evidence/summarize_search.py RESULTS.json
"""

from __future__ import annotations

import json
import math
import sys


def _shape_medians(contender: dict) -> str:
    return ", ".join(f"{s['shape']} {s['measurement']['median_us']:.1f}" for s in contender.get("shapes", [])
                     if s.get("measurement"))


def main(path: str) -> None:
    data = json.load(open(path))
    problems = data["problems"]
    print("| problem | baseline µs (per shape) | torch.compile default | best found | best µs | % of floor |")
    print("| --- | --- | --- | --- | --- | --- |")
    significant, ratios, vs_compile, tried = 0, [], [], 0
    for p in problems:
        attempts = {a["name"]: a for a in p["attempts"]}
        tried += len(p["attempts"])
        comp = attempts.get("compile-default-reference")
        comp_txt = (f"{comp['speedup']:.2f}x [{comp['speedup_ci'][0]:.2f}, {comp['speedup_ci'][1]:.2f}]"
                    if comp and comp.get("speedup") else
                    f"rejected: {comp['reasons'][0][:60]}" if comp else "-")
        timed = [a for a in p["attempts"] if a.get("speedup_ci")]
        best = max(timed, key=lambda a: a["speedup_ci"][0], default=None)
        if best:
            ratios.append(best["speedup"])
            significant += best["speedup_ci"][0] >= 1.1
            if comp and comp.get("speedup"):
                vs_compile.append(best["speedup"] / comp["speedup"])
        floors = [s.get("pct_of_floor") for s in (best or {}).get("shapes", [])]
        print(f"| {p['problem']} | {_shape_medians(p['baseline'])} | {comp_txt} | "
              f"{best['name'] + ' ' + format(best['speedup'], '.2f') + 'x [' + format(best['speedup_ci'][0], '.2f') + ', ' + format(best['speedup_ci'][1], '.2f') + ']' if best else '-'} | "
              f"{_shape_medians(best) if best else '-'} | "
              f"{', '.join(f'{f:.0f}%' for f in floors if f is not None) or '-'} |")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    print(f"\nproblems: {len(problems)}; significant >= 1.1x (CI lower bound): {significant} "
          f"({significant / max(len(problems), 1):.0%}); geometric-mean speedup of the best: {geo:.2f}x; "
          f"candidates tried: {tried}")
    if vs_compile:
        g2 = math.exp(sum(map(math.log, vs_compile)) / len(vs_compile))
        print(f"geometric mean against torch.compile default: {g2:.2f}x over {len(vs_compile)} problems")


if __name__ == "__main__":
    main(sys.argv[1])
