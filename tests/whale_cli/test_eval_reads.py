"""Large held-out reads: `whale eval --out DIR` continues an interrupted read, `whale paired` pairs
finished ones task by task."""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import write_read

from whale_cli.main import main
from whale_dspy.jsonl import read_jsonl


def refused(argv: list[str], capsys) -> str:
    """The error `whale` printed for a command it refused (exit status 2)."""
    capsys.readouterr()
    assert main(argv) == 2
    return capsys.readouterr().err


@pytest.fixture
def server_url(fake_server_url) -> str:
    return fake_server_url[0]


def test_a_read_continues_in_its_folder_and_refuses_other_settings(tmp_path, server_url, capsys, monkeypatch):
    from whale_dspy.backends.remote import RemoteServer

    # As a server that knows its dtype says it (one someone else started cannot: None).
    monkeypatch.setattr(RemoteServer, "serving", lambda self: {"server": "remote", "dtype": "float32"})
    out = tmp_path / "read"
    argv = ["eval", "--domain", "chess", "--limit", "3", "--k", "1", "--server-url", server_url]
    argv += ["--model", "org/asked-model", "--out", str(out)]
    assert main(argv) == 0
    first = json.loads((out / "report.json").read_text())
    traces = list(read_jsonl(out / "traces.jsonl"))
    assert (first["rollouts"], first["resumed"]) == (3, 0)
    # Killed while writing the third rollout: it is run again, the first two are kept as recorded.
    torn = json.dumps(traces[2])[:40]
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces[:2]) + torn)
    (out / "report.json").unlink()
    assert main(argv) == 0
    resumed = json.loads((out / "report.json").read_text())
    assert (resumed["rollouts"], resumed["resumed"]) == (3, 2)
    assert resumed["per_task"] == first["per_task"]
    again = list(read_jsonl(out / "traces.jsonl"))
    assert again[:2] == traces[:2] and len(again) == 3
    assert again[2]["rollout_id"] == traces[2]["rollout_id"]
    # Checked before any server starts: nothing listens at the dead address.
    dead = [*argv[:8], "http://127.0.0.1:9", *argv[9:]]
    assert main(dead) == 0 and "holds this read, finished" in " ".join(capsys.readouterr().out.split())
    assert "other settings: k: 1 -> 2" in refused([*dead[:6], "2", *dead[7:]], capsys)
    assert "sampling.temperature: 1.0 -> 0.5" in refused([*dead, "--temperature", "0.5"], capsys)
    assert "harness.name: 'chess_h0' -> 'search_h0'" in refused([*dead, "--harness", "search_h0"], capsys)
    assert "`whale serve --dtype`" in refused([*dead, "--dtype", "bfloat16"], capsys)  # not the own server
    assert len(list(read_jsonl(out / "traces.jsonl"))) == 3  # the refused reads added nothing
    (out / "report.json").unlink()
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "served_model": "another/model"}))
    assert "served_model: 'another/model' ->" in refused(argv, capsys)  # the server serves another
    # Begun in bf16 on a machine with bf16 math, resumed where the server serves float32.
    assert config["served_dtype"] == "float32"
    (out / "config.json").write_text(json.dumps({**config, "served_dtype": "bfloat16"}))
    assert "served_dtype: 'bfloat16' -> 'float32'" in refused(argv, capsys)
    (out / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "served_dtype"}))
    assert "begun before reads recorded their dtype" in refused(argv, capsys)  # older reads: say which
    (out / "config.json").unlink()  # traces from before reads recorded their settings
    assert "with no recorded settings" in refused(dead, capsys)


def test_a_read_refuses_a_folder_holding_anything_else(tmp_path, capsys):
    from whale_helpers import scripted_run

    run_dir = tmp_path / "run"
    scripted_run(run_dir, budget=30)
    (run_dir / "report.json").unlink()  # as a run still going has none
    config = (run_dir / "config.json").read_text()
    argv = ["eval", "--domain", "chess", "--limit", "2", "--k", "1", "--server-url", "http://127.0.0.1:9"]
    assert "something other than an interrupted read" in refused([*argv, "--out", str(run_dir)], capsys)
    assert (run_dir / "config.json").read_text() == config  # the run's record is untouched
    kept = tmp_path / "kept-read"  # a finished read committed with its traces gzipped
    kept.mkdir()
    (kept / "report.json").write_text("{}")
    assert "gunzip a kept copy" in refused([*argv, "--out", str(kept)], capsys)


def test_a_first_try_that_ran_nothing_leaves_the_folder_free(tmp_path, server_url):
    out = tmp_path / "read"
    out.mkdir()
    stale = {"adapter": "/a/wrong/path", "served_model": "m"}  # written once served, then it failed
    (out / "config.json").write_text(json.dumps(stale))
    argv = ["eval", "--domain", "chess", "--limit", "2", "--k", "1", "--server-url", server_url]
    assert main([*argv, "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["adapter"] is None


def test_paired_compares_every_later_read_with_every_earlier_one(tmp_path, capsys):
    start = write_read(tmp_path / "start", {f"t{i}": [0.0] for i in range(40)})
    half = {f"t{i}": [1.0 if i % 2 else 0.0] for i in range(40)}
    better = write_read(tmp_path / "better", half, adapter="/a")
    same = write_read(tmp_path / "same", half, harness="c1")
    table_file = tmp_path / "table.md"
    argv = ["paired", str(start), str(better), str(same), "--labels", "h0,weights,harness"]
    assert main([*argv, "--out", str(table_file)]) == 0
    table = table_file.read_text()
    assert table in capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if " − " in line}
    assert list(rows) == ["weights − h0", "harness − h0", "harness − weights"]
    assert "| +0.500 |" in rows["weights − h0"] and "beyond noise" in rows["weights − h0"]
    assert "| +0.000 | [+0.000, +0.000] | 40 | within noise |" in rows["harness − weights"]
    assert "| weights | h0 | adapter | bfloat16 | 40 | 1 |" in table and "| harness | c1 | base |" in table
    assert "different dtypes" not in table
    fp32 = write_read(tmp_path / "fp32", half, dtype="float32")  # the same program on a machine without bf16
    assert main(["paired", str(better), str(fp32)]) == 0
    out = capsys.readouterr().out
    assert "| fp32 | h0 | base | float32 |" in out and "served in different dtypes" in out
    remote = write_read(tmp_path / "remote", half, dtype=None)  # a server someone else started
    assert main(["paired", str(better), str(remote)]) == 0
    out = capsys.readouterr().out
    assert "| remote | h0 | base | ? |" in out and "different dtypes" not in out  # unknown, not different


def test_paired_widens_the_pairs_intervals_for_a_family_of_comparisons(tmp_path, capsys):
    start = write_read(tmp_path / "start", {f"t{i}": [0.0] for i in range(80)})
    # 22 tasks gained a point, 10 lost one: beyond noise alone, not as one of four comparisons
    gains = {f"t{i}": [1.0 if i < 22 else -1.0 if i < 32 else 0.0] for i in range(80)}
    better = write_read(tmp_path / "better", gains)
    assert main(["paired", str(start), str(better)]) == 0
    alone = capsys.readouterr().out
    assert "| pair | gain | 95% CI |" in alone and "| better − start | +0.150 | [+0.025," in alone
    assert "beyond noise" in alone and "holds m comparisons" not in alone
    assert main(["paired", str(start), str(better), "--level", "0.9875"]) == 0
    family = capsys.readouterr().out
    assert "| pair | gain | 98.75% CI |" in family and "| better − start | +0.150 | [-0.025," in family
    assert "within noise" in family and "at 98.75%: each of 4 comparisons" in family
    assert "out of range" in refused(["paired", str(start), str(better), "--level", "1"], capsys)


def test_paired_pools_seeds_of_one_method_task_by_task(tmp_path, capsys):
    """Two seeds joined by the path separator are one read: each task's scores over both seeds, so
    the pair is the gain averaged over seeds, on the tasks both scored."""
    start = write_read(tmp_path / "start", {f"t{i}": [0.0] for i in range(40)})
    gains1 = {f"t{i}": [1.0 if i % 2 else 0.0] for i in range(40)}
    gains2 = {f"t{i}": [1.0 if i % 4 == 1 else 0.0] for i in range(40)}
    seed1 = write_read(tmp_path / "s1", gains1, adapter="/a1")
    seed2 = write_read(tmp_path / "s2", gains2, adapter="/a2")
    assert main(["paired", str(start), f"{seed1}{os.pathsep}{seed2}"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| s1+s2 − start |"))
    # (0.5 + 0.25) / 2 over the 40 tasks; the seeded interval (1 seed against 2) decides the verdict
    assert "| +0.375 |" in row and "| 40 | 1 vs 2 | beyond noise |" in row
    assert "| pair | gain | 95% CI (tasks) | 95% CI (seeds, tasks) |" in out
    pooled = next(
        line for line in out.splitlines() if line.startswith("| s1+s2 | h0 | adapter | bfloat16 | 40 | 2 |")
    )
    low, high = map(float, pooled.split(" [")[1].rstrip("] |").split(", "))
    assert low < 0.375 < high and high - low < 0.4  # over the pooled task means, not a seed's own [0, 1]
    assert "Seeds pooled task by task (s1+s2 pools 2 reads;" in out
    assert main(["paired", str(start), str(seed1)]) == 0  # one seed alone: no pooling, no note
    out = capsys.readouterr().out
    assert "| s1 − start | +0.500 |" in out and "Seeds pooled" not in out
    unknown = write_read(tmp_path / "unknown", gains2, dtype=None)  # a server that cannot say its dtype
    assert main(["paired", str(start), f"{seed1}{os.pathsep}{unknown}"]) == 0
    assert "different dtypes" not in capsys.readouterr().out
    other = write_read(tmp_path / "other", {f"t{i}": [1.0] for i in range(1, 41)})
    val = write_read(tmp_path / "val", gains2, split="val")
    k2 = write_read(tmp_path / "k2", {f"t{i}": [1.0, 0.0] for i in range(40)})
    for pool, why in [
        (f"{seed1}{os.pathsep}{other}", "score different tasks"),
        (f"{seed1}{os.pathsep}{val}", "different domains or splits"),
        (f"{seed1}{os.pathsep}{k2}", "differ in k"),
        (f"{seed1}{os.pathsep}{seed1}", "distinct read folders"),
        (f"{seed1}{os.pathsep}", "distinct read folders"),
    ]:
        assert why in refused(["paired", str(start), pool, "--labels", "h0,pool"], capsys), pool


def test_paired_takes_the_difference_of_two_gains_task_by_task(tmp_path, capsys):
    """(A − B) − (C − D): a harness's gain on a checkpoint against its gain on the base weights, paired
    by task, so the tasks both gains share cancel; the two gains' own intervals cannot say this."""
    zeros = {f"t{i}": [0.0] for i in range(60)}
    base_h0 = write_read(tmp_path / "base-h0", zeros)
    base_pick = write_read(
        tmp_path / "base-pick", {f"t{i}": [float(i < 12)] for i in range(60)}, harness="c1"
    )
    ckpt_h0 = write_read(tmp_path / "ckpt-h0", zeros, adapter="/a")
    # the checkpoint's pick solves the base pick's 12 tasks and 12 more: the gain is larger by 0.2
    ckpt_pick = write_read(
        tmp_path / "ckpt-pick", {f"t{i}": [float(i < 24)] for i in range(60)}, adapter="/a"
    )
    reads = [str(base_h0), str(base_pick), str(ckpt_h0), str(ckpt_pick)]
    spec = "ckpt-pick,ckpt-h0,base-pick,base-h0"
    assert (
        main(["paired", *reads, "--difference", spec, "--difference", "base-pick,base-h0,ckpt-pick,ckpt-h0"])
        == 0
    )
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| (")}
    larger = rows["(ckpt-pick − ckpt-h0) − (base-pick − base-h0)"]
    assert "| +0.200 | [+0.100, +0.300] | 60 | beyond noise |" in larger
    assert "| -0.200 |" in rows["(base-pick − base-h0) − (ckpt-pick − ckpt-h0)"]
    assert "A difference of gains" in out
    same = write_read(tmp_path / "same", {f"t{i}": [float(i < 12)] for i in range(60)}, adapter="/a")
    assert main(["paired", *reads[:3], str(same), "--difference", "same,ckpt-h0,base-pick,base-h0"]) == 0
    assert "| +0.000 | [+0.000, +0.000] | 60 | within noise |" in capsys.readouterr().out
    assert "four distinct reads" in refused(
        ["paired", *reads, "--difference", "ckpt-pick,ckpt-h0,base-pick"], capsys
    )
    assert "four distinct reads" in refused(
        ["paired", *reads, "--difference", "ckpt-pick,ckpt-h0,x,base-h0"], capsys
    )
    pooled = f"{ckpt_pick}{os.pathsep}{same}"
    argv = ["paired", *reads[:3], pooled, "--difference", "ckpt-pick+same,ckpt-h0,base-pick,base-h0"]
    assert "not pooled seeds" in refused(argv, capsys)


def test_paired_refuses_what_cannot_be_paired(tmp_path, capsys):
    a = write_read(tmp_path / "a", {"t0": [1.0]})
    assert "at least two reads" in refused(["paired", str(a)], capsys)
    b = write_read(tmp_path / "b", {"t0": [1.0]}, split="val")
    assert "different domains or splits" in refused(["paired", str(a), str(b)], capsys)
    c = write_read(tmp_path / "c", {"t1": [1.0]})
    assert "share at least one task" in refused(["paired", str(a), str(c)], capsys)
    assert "holds no finished read" in refused(["paired", str(a), str(tmp_path / "unfinished")], capsys)
    assert "--labels names 1 reads, but 2" in refused(["paired", str(a), str(c), "--labels", "one"], capsys)
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"method": "whale", "final": {"per_task": {}}}))
    assert "is not a `whale eval` read" in refused(["paired", str(a), str(run)], capsys)


def test_dtype_goes_to_the_reads_own_server():
    from argparse import Namespace

    from whale_cli.eval import own_server_options

    assert own_server_options(Namespace(dtype="bfloat16", server_url=None, thinking=None)) == {
        "dtype": "bfloat16"
    }
    assert own_server_options(Namespace(dtype=None, server_url=None, thinking=None)) == {}
