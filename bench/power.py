"""Sizing a comparison across seeds: the variance components of a method difference, and the seeds
per method and test tasks a target half-width needs.

Each read is one seed's final program scored on the same test tasks. Per method, a two-way
layout (seeds x tasks, one cell each) splits a read's score into a seed's offset (training noise,
`seed`), and what is left per seed and task (`residual`: the seed's task-by-task wobble plus the
sampling of one read); per pair of methods, the variance over tasks of their seed-mean difference,
less the residual it carries, is how much the true gain varies from task to task (`task`). The
difference of two methods' means over n seeds each on T tasks at k samples a task then has

    SE^2 = 2 seed / n + task / T + 2 (interaction + reread / k) / (n T),

where the residual = interaction + sampling, and `sampling` (the part that more samples a task
average away) is the variance between one task's k samples in a run's k > 1 checkpoints (`--within`:
a `whale report` report.json); without it none of the residual is assumed to shrink with k. (Two
reads of one program share rollout ids, so they repeat its samples: they cannot give `sampling`.)
The half-width is t(0.975, 2n - 2) x SE: few seeds give few degrees of freedom.

    python bench/power.py --reads bench/reads/decisive-squad-400 \
        --method whale=whale-fixed-s1,whale-now-s2 --method weight-only=weight-only-s1-f32,weight-only-s2 \
        --within bench/records/decisive-squad.tar.gz/report.json
    python bench/power.py --reads NEW_READS --method ... \
        --against-reads bench/reads/decisive-squad-400 --against-method whale=whale-fixed-s1,whale-now-s2 ...
    python bench/power.py --tiny      # CI: synthetic reads with known components, recovered

`--against-*` compares the seed spread of these reads with another comparison's (issue 46: does the
paired rule's racing shrink the spread between seeds of one recipe?): the ratio of their seed
variances, each with the residual share its seed means carry, and its F interval.

--reads and --within may go on inside a record archive (bench/records/README.md).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import stats

from whale_dspy.record_archives import RecordArchives

Scores = np.ndarray
"""One method's reads: seeds x tasks, each cell a task's mean score in one read."""


class Components(NamedTuple):
    """Variance components of one read's score, and the degrees of freedom behind the seed's."""

    seed: float
    residual: float
    task: float
    sampling: float | None
    seed_df: int
    tasks_read: int
    seed_mean_square: float | None = None
    """The seed mean square over tasks read, which estimates `seed + residual / tasks_read` and, unlike
    `seed`, is never clipped at zero; None: take that sum."""

    def seed_interval(self, level: float = 0.95) -> tuple[float, float]:
        """A chi-square interval for `seed` (its estimate rests on few seeds: it is rough)."""
        tail = (1 - level) / 2
        total = self.seed_total
        low = self.seed_df * total / stats.chi2.ppf(1 - tail, self.seed_df) - self.residual_share
        high = self.seed_df * total / stats.chi2.ppf(tail, self.seed_df) - self.residual_share
        return max(low, 0.0), max(high, 0.0)

    @property
    def residual_share(self) -> float:
        return self.residual / self.tasks_read

    @property
    def seed_total(self) -> float:
        """The variance of one seed's mean over the tasks read: chi-square with `seed_df`."""
        return self.seed + self.residual_share if self.seed_mean_square is None else self.seed_mean_square


class SpreadRatio(NamedTuple):
    """This comparison's seed variance over another's, each with the residual share its seed means
    carry (what the seed mean square estimates), and the F interval of the ratio."""

    ratio: float
    low: float
    high: float

    def line(self, level: float = 0.95) -> str:
        sd = SpreadRatio(*np.sqrt(self))
        verdict = "smaller" if self.high < 1 else "larger" if self.low > 1 else "not different beyond noise"
        return (
            f"seed-mean sd here / against: {sd.ratio:.2f} ({level:.0%} interval {sd.low:.2f}-{sd.high:.2f}): "
            f"{verdict}"
        )


def spread_ratio(here: Components, against: Components, level: float = 0.95) -> SpreadRatio:
    """`here`'s seed spread against `against`'s: seed + residual / tasks on each side, whose estimates
    are chi-square with the seed degrees of freedom, so their ratio over the true one is F."""
    if against.seed_total <= 0:
        raise SystemExit("the seeds compared against read identically: they have no spread to compare with")
    tail = (1 - level) / 2
    ratio = here.seed_total / against.seed_total
    f = stats.f(here.seed_df, against.seed_df)
    return SpreadRatio(ratio, ratio / f.ppf(1 - tail), ratio / f.ppf(tail))


def matrix(per_seed: Sequence[Mapping[str, Sequence[float]]], tasks: Sequence[str]) -> Scores:
    return np.array([[np.mean(seed[t]) for t in tasks] for seed in per_seed], dtype=float)


def components(methods: Mapping[str, Scores], sampling: float | None = None) -> Components:
    """Seed, residual and task components pooled over methods (ANOVA moments, weighted by df)."""
    seed_ss = resid_ss = 0.0
    seed_df = resid_df = 0
    tasks = next(iter(methods.values())).shape[1]
    for scores in methods.values():
        n = scores.shape[0]
        if n < 2:
            continue
        cells = scores - scores.mean(axis=1, keepdims=True) - scores.mean(axis=0) + scores.mean()
        resid_ss += float((cells**2).sum())
        resid_df += (n - 1) * (tasks - 1)
        seed_ss += tasks * float(((scores.mean(axis=1) - scores.mean()) ** 2).sum())
        seed_df += n - 1
    if not seed_df:
        raise SystemExit("the seed component needs a method read at two seeds or more")
    residual = resid_ss / resid_df
    seed = max((seed_ss / seed_df - residual) / tasks, 0.0)
    pairs = [pair_task_variance(a, b, residual) for a, b in combinations(methods.values(), 2)]
    task = float(np.mean(pairs)) if pairs else 0.0  # one method (a spread to compare against): no gap
    return Components(seed, residual, task, sampling, seed_df, tasks, seed_ss / seed_df / tasks)


def pair_task_variance(a: Scores, b: Scores, residual: float) -> float:
    """How much two methods' true gain varies over tasks: their seed-mean gap's task variance,
    less the residual the seed means still carry."""
    gap = a.mean(axis=0) - b.mean(axis=0)
    return max(float(np.var(gap, ddof=1)) - residual * (1 / a.shape[0] + 1 / b.shape[0]), 0.0)


def standard_error(c: Components, seeds: int, tasks: int, k: int = 1) -> float:
    """The SE of two methods' mean gap over `seeds` seeds each, read on `tasks` tasks at k samples."""
    sampling = min(c.sampling or 0.0, c.residual)
    residual = c.residual - sampling + sampling / k
    return float(np.sqrt(2 * c.seed / seeds + c.task / tasks + 2 * residual / (seeds * tasks)))


def half_width(c: Components, seeds: int, tasks: int, k: int = 1, level: float = 0.95) -> float:
    quantile = stats.t.ppf(1 - (1 - level) / 2, 2 * seeds - 2)
    return float(quantile * standard_error(c, seeds, tasks, k))


def seeds_needed(c: Components, tasks: int, target: float, k: int = 1, most: int = 200) -> int | None:
    """The fewest seeds per method whose half-width is at most `target` (None beyond `most`)."""
    return next((n for n in range(2, most + 1) if half_width(c, n, tasks, k) <= target), None)


def sizing_table(c: Components, target: float, tasks: Sequence[int], ks: Sequence[int]) -> str:
    rows = [f"| test tasks | k | seeds per method for ±{target:.2f} | half-width at 5 seeds | at 8 seeds |"]
    rows.append("|---|---|---|---|---|")
    for t in tasks:
        for k in ks:
            n = seeds_needed(c, t, target, k)
            cells = (
                t,
                k,
                n or "over 200",
                f"±{half_width(c, 5, t, k):.3f}",
                f"±{half_width(c, 8, t, k):.3f}",
            )
            rows.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(rows)


def report(c: Components, target: float, tasks: Sequence[int], ks: Sequence[int]) -> str:
    low, high = c.seed_interval()
    lines = [
        f"seed sd {np.sqrt(c.seed):.4f} (95% interval {np.sqrt(low):.4f}-{np.sqrt(high):.4f}, "
        f"{c.seed_df} df)",
        f"residual sd {np.sqrt(c.residual):.4f} per read and task"
        + (f" (of it sampling sd {np.sqrt(c.sampling):.4f})" if c.sampling is not None else ""),
        f"task sd of the true gain {np.sqrt(c.task):.4f}",
        "",
        sizing_table(c, target, tasks, ks),
        "",
        f"seeds per method for ±{target:.2f} at {max(tasks)} tasks, k=1, if the seed sd were at its "
        "interval's ends: "
        + ", ".join(
            f"sd {np.sqrt(v):.3f}: {seeds_needed(at_seed(c, v), max(tasks), target) or 'over 200'}"
            for v in (low, high)
        ),
    ]
    return "\n".join(lines)


def at_seed(c: Components, seed: float) -> Components:
    """`c` with another seed component (and the mean square that goes with it)."""
    return c._replace(seed=seed, seed_mean_square=None)


def load_reads(folder: Path, names: Sequence[str]) -> list[dict[str, list[float]]]:
    return [json.loads((folder / name / "report.json").read_text())["per_task"] for name in names]


Reads = dict[str, list[dict[str, list[float]]]]
"""Each method's reads (one per seed), as per-task scores."""


def read_methods(folder: Path, specs: Sequence[str]) -> Reads:
    """Each `NAME=READ,READ,...` spec's reads."""
    per_method = {}
    for spec in specs:
        name, reads = spec.split("=", 1)
        per_method[name] = load_reads(folder, reads.split(","))
    return per_method


def shared_tasks(*sides: Reads) -> list[str]:
    return sorted(set.intersection(*(set(s) for side in sides for seeds in side.values() for s in seeds)))


def on_tasks(reads: Reads, tasks: Sequence[str]) -> dict[str, Scores]:
    return {name: matrix(seeds, tasks) for name, seeds in reads.items()}


def within_task_variance(path: Path) -> float:
    """The mean variance between one task's samples in the final checkpoints of a comparison's runs
    (those with k > 1): what a read at k samples a task divides by k."""
    runs = json.loads(path.read_text())
    variances = [
        float(np.var(scores, ddof=1))
        for run in (runs if isinstance(runs, list) else [runs])
        for scores in ((run.get("final") or {}).get("per_task") or {}).values()
        if len(scores) > 1
    ]
    if not variances:
        raise SystemExit(f"{path} holds no final checkpoint scored at k > 1")
    return float(np.mean(variances))


def synthetic(rng: np.random.Generator, *, methods: int, seeds: int, tasks: int, sd: Mapping[str, float]):
    """Reads drawn with known components: task difficulty, a per-method task effect, seed offsets."""
    difficulty = rng.normal(0.4, 0.2, tasks)
    drawn = {}
    for m in range(methods):
        effect = rng.normal(0, sd["task"] / np.sqrt(2), tasks)  # a pair's gap varies by sd["task"]
        offsets = rng.normal(0, sd["seed"], (seeds, 1))
        drawn[f"m{m}"] = difficulty + effect + offsets + rng.normal(0, sd["residual"], (seeds, tasks))
    return drawn


TINY_SD = {"seed": 0.05, "task": 0.15, "residual": 0.25}


def main(argv: Sequence[str] | None = None) -> Components:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reads", type=Path, help="a folder of `whale eval` read folders")
    parser.add_argument("--method", action="append", default=[], help="NAME=READ,READ,... (its seeds)")
    parser.add_argument("--within", type=Path, default=None, help="a `whale report` report.json (k > 1)")
    parser.add_argument("--target", type=float, default=0.05, help="the 95%% half-width wanted")
    parser.add_argument("--tasks", default="80,200,400", help="test task counts to size")
    parser.add_argument("--k", default="1,2,4", help="samples per task to size")
    parser.add_argument(
        "--against-reads", type=Path, help="another comparison's read folders, read at the same k"
    )
    parser.add_argument(
        "--against-method", action="append", default=[], help="NAME=READ,READ,... of --against-reads"
    )
    parser.add_argument("--tiny", action="store_true", help="synthetic reads with known components")
    args = parser.parse_args(argv)
    if args.tiny:
        drawn = synthetic(np.random.default_rng(0), methods=40, seeds=3, tasks=400, sd=TINY_SD)
        c = components(drawn)
        print("true: " + ", ".join(f"{name} sd {value}" for name, value in TINY_SD.items()))
    else:
        if args.reads is None or len(args.method) < 2:
            parser.error("give --reads and at least two --method NAME=READ,READ")
        if bool(args.against_reads) != bool(args.against_method):
            parser.error("give --against-reads with its --against-method NAME=READ,READ")
        with RecordArchives() as archives:
            reads = read_methods(archives.local(args.reads), args.method)
            sampling = None if args.within is None else within_task_variance(archives.local(args.within))
            against = args.against_reads and read_methods(
                archives.local(args.against_reads), args.against_method
            )
        methods = on_tasks(reads, shared_tasks(reads))
        c = components(methods, sampling)
        print(
            f"{next(iter(methods.values())).shape[1]} shared tasks; methods: "
            + ", ".join(f"{n} ({len(s)} seeds)" for n, s in methods.items())
        )
        if against:
            both = shared_tasks(reads, against)  # a seed mean's spread depends on how many tasks it averages
            if len(both) < 2:
                parser.error(f"the two comparisons share {len(both)} read tasks: at least two are needed")
            print(
                f"against, on the {len(both)} tasks both read: "
                + ", ".join(f"{n} ({len(s)} seeds)" for n, s in against.items())
            )
            print(spread_ratio(components(on_tasks(reads, both)), components(on_tasks(against, both))).line())
    print(
        report(c, args.target, [int(t) for t in args.tasks.split(",")], [int(k) for k in args.k.split(",")])
    )
    return c


if __name__ == "__main__":
    main()
