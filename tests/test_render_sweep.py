"""`isaacd sweep status` and `isaacd sweeps` as a person reads them (daemon/cli/render_sweep.py, issue 39): a sweep
of etc/sweep.example.toml part way through ASHA, its trials' values the sampler's for that file, its status as the
control socket answers it (SweepStatus JSON)."""

from __future__ import annotations

from pathlib import Path

from isaacd.cli.render_sweep import format_sweep, format_sweeps, short_names, value_text
from isaacd.status.types import Status
from isaacd.sweeps.sampler import sample, trial_name
from isaacd.sweeps.spec import load_sweep
from isaacd.status.sweeps import SweepStatus, TrialStatus

NOW = 1_700_000_000.0
EXAMPLE = Path(__file__).resolve().parents[1] / "etc" / "sweep.example.toml"

# (trial number, state, iteration, objective, rung values): ranked as sweeps.asha.ranking does (furthest rung first,
# then by the value there), 8 of the 16 trials started, concurrency 4: what sweeps.asha.decide made of these arrivals
# (test_the_example_is_what_asha_decides)
PROGRESS = [
    (3, "running", 212, 471.8, (402.5, 466.1)),
    (6, "running", 171, 455.0, (391.0, 448.7)),
    (1, "paused", 150, 431.2, (377.9, 431.2)),
    (5, "running", 64, 401.4, (395.0,)),
    (2, "paused", 50, 188.3, (188.3,)),
    (7, "paused", 50, 95.6, (95.6,)),
    (4, "failed", 37, None, ()),
    (8, "running", 12, 21.4, ()),
]


def example_status() -> SweepStatus:
    spec = load_sweep(EXAMPLE)
    configs = sample(spec.space, spec.trials, spec.seed)
    trials = []
    for number, state, iteration, objective, values in PROGRESS:
        trials.append(TrialStatus(number=number, job=trial_name(spec.name, number, spec.trials),
                                  values=configs[number - 1], state=state, iteration=iteration, objective=objective,
                                  rung=len(values) - (state == "paused"), rung_values=values,
                                  gpu_seconds=iteration * 1.9))
    trials += [TrialStatus(number=n, job=trial_name(spec.name, n, spec.trials), values=configs[n - 1])
               for n in range(9, spec.trials + 1)]
    raw = SweepStatus(name=spec.name, owner="alice", state="running", source=str(EXAMPLE), submitted_at=NOW - 1500,
                      trials_total=spec.trials, concurrency=spec.concurrency, objective_tag=spec.objective.tag,
                      mode=spec.objective.mode, smooth=spec.objective.smooth, scheduler=spec.scheduler.kind,
                      reduction_factor=spec.scheduler.reduction_factor, rungs=spec.scheduler.rungs,
                      max_iterations=spec.base.max_iterations, best=3, best_objective=471.8,
                      gpu_seconds=sum(t.gpu_seconds for t in trials), trials=tuple(trials)).to_json()
    return SweepStatus.from_json(raw)  # as `isaacd sweep status` gets it: through the wire format


def test_the_example_is_what_asha_decides():
    """The rendered sweep is a real one: ASHA's decisions replayed over the arrivals at each rung give these states,
    and its ranking this order."""
    from dataclasses import replace

    from isaacd.sweeps.asha import Asha, Continue, Launch, Pause, Promote, TrialState, TrialView, decide, ranking

    asha = Asha(rungs=(50, 150, 450), max_iterations=500, eta=3, concurrency=4)
    views = {n: TrialView(n, TrialState.PENDING) for n in range(1, 17)}

    def step() -> None:
        for d in decide(asha, list(views.values())):
            t = views[d.trial]  # type: ignore[union-attr]  # (no Done in this sweep)
            if isinstance(d, Launch):
                views[d.trial] = replace(t, state=TrialState.RUNNING)
            elif isinstance(d, (Continue, Promote)):
                views[d.trial] = replace(t, state=TrialState.RUNNING, passed=d.rung + 1)
            elif isinstance(d, Pause):
                views[d.trial] = replace(t, state=TrialState.PAUSED)

    step()
    arrivals = [(1, 0), (2, 0), (3, 0), (4, None), (6, 0), (5, 0), (6, 1), (3, 1), (1, 1), (7, 0)]
    progress = {p[0]: p for p in PROGRESS}
    for number, rung in arrivals:
        if rung is None:
            views[number] = replace(views[number], state=TrialState.FAILED)
        else:
            views[number] = replace(views[number], values=progress[number][4][:rung + 1])
        step()
    for number, state, iteration, _, values in PROGRESS:
        views[number] = replace(views[number], iteration=iteration)
        assert (views[number].state.value, views[number].values) == (state, values), number
    assert ranking(asha, list(views.values())) == tuple(t.number for t in example_status().trials)


def table(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("TRIAL"))
    return [line.split() for line in lines[start:] if line.startswith(("TRIAL", "cartpole-lr-"))]


def test_the_best_trial_is_the_first_row_and_the_header_names_it():
    text = format_sweep(example_status(), NOW)
    rows = table(text)
    assert rows[0] == ["TRIAL", "learning_rate", "entropy_coef", "gamma", "num_envs", "seed", "STATE", "ITER",
                       "OBJECTIVE", "RUNG"]
    assert rows[1][0] == "cartpole-lr-t003" and rows[1][-4:] == ["running", "212/500", "471.80", "150"]
    assert "best: cartpole-lr-t003, Train/mean_reward 471.80" in text
    assert "as a job file: isaacd sweep best cartpole-lr > best.toml" in text
    # every trial has its row, the pending ones last with nothing measured yet
    assert [r[0] for r in rows[1:]] == [f"cartpole-lr-t{n:03d}" for n in [p[0] for p in PROGRESS] + list(range(9, 17))]
    assert rows[-1][-4:] == ["pending", "-", "-", "-"]


def test_the_header_says_what_the_sweep_is_and_what_it_cost():
    text = format_sweep(example_status(), NOW)
    head = text.split("\n\n")[0]
    assert head.splitlines()[0] == "sweep cartpole-lr  running  owner alice  submitted 25m ago"
    assert "objective Train/mean_reward (max, the mean of the last 10 logged iterations)" in head
    assert "scheduler asha: eta 3 (the top 1/3 at a rung go on), rungs at 50, 150, 450 of 500 iterations; at most 4 " \
           "at once" in head
    assert "trials: 16: 4 running, 3 paused, 8 pending, 1 failed" in head
    assert "GPU time so far: 23.6 GPU-min (1417 GPU-seconds)" in head


def test_hyperparameters_read_as_numbers_a_person_compares():
    sw = example_status()
    rows = {r[0]: r for r in table(format_sweep(sw, NOW))[1:]}
    t3 = sw.trial(3)
    assert t3 is not None
    row = rows["cartpole-lr-t003"]
    # learning rate and entropy in 4 significant digits, the grid's gamma and the choices as written
    assert row[1] == f"{t3.values['agent.algorithm.learning_rate']:.4g}" and len(row[1]) <= 9
    assert row[3] == str(t3.values["agent.algorithm.gamma"]) and row[4] in ("1024", "2048")
    assert value_text(0.000312457) == "0.0003125" and value_text(1.23457e-05) == "1.235e-05"
    assert value_text(True) == "true"


def test_a_paused_trial_shows_the_rung_it_waits_at():
    text = format_sweep(example_status(), NOW)
    rows = {r[0]: r for r in table(text)[1:]}
    assert rows["cartpole-lr-t001"][-4:] == ["paused", "150/500", "431.20", "150"]
    assert rows["cartpole-lr-t002"][-4:] == ["paused", "50/500", "188.30", "50"]
    assert rows["cartpole-lr-t004"][-4:] == ["failed", "37/500", "-", "-"]
    assert "3 paused at their rung with a save: each costs no GPU while paused and resumes exactly where it " \
           "stopped if promoted" in text


def test_columns_are_aligned():
    lines = [line for line in format_sweep(example_status(), NOW).splitlines()
             if line.startswith(("TRIAL", "cartpole-lr-"))]
    header = lines[0]
    for column in ("STATE", "ITER", "OBJECTIVE", "RUNG"):
        at = header.index(column)
        assert all(line[at - 2:at] == "  " and line[at] != " " for line in lines[1:]), column


def test_two_keys_ending_alike_get_columns_that_tell_them_apart():
    assert short_names(["agent.algorithm.gamma", "env.rewards.gamma", "seed"]) == {
        "agent.algorithm.gamma": "algorithm.gamma", "env.rewards.gamma": "rewards.gamma", "seed": "seed"}


def test_before_any_rung_and_without_asha():
    sw = SweepStatus(name="quick", trials_total=2, concurrency=2, scheduler="none", max_iterations=100,
                     trials=(TrialStatus(1, "quick-t001", {"seed": 1}, state="running", iteration=3),
                             TrialStatus(2, "quick-t002", {"seed": 2})))
    text = format_sweep(sw, NOW)
    assert "scheduler none: every trial trains to 100 iterations; at most 2 at once" in text
    assert "best: none yet" in text
    assert "paused" not in text


def test_sweeps_lists_one_line_per_sweep():
    done = SweepStatus(name="anymal-ent", owner="bob", state="done", reason="stop_at 0.9 reached", trials_total=8,
                       best=2, best_objective=0.913, objective_tag="Metrics/success_rate", gpu_seconds=30_000,
                       trials=(TrialStatus(2, "anymal-ent-t002", state="completed", objective=0.913),
                               TrialStatus(1, "anymal-ent-t001", state="paused", objective=0.5)))
    lines = format_sweeps([example_status(), done]).splitlines()
    assert lines[0].split() == ["SWEEP", "OWNER", "STATE", "TRIALS", "RUNNING", "PAUSED", "DONE", "FAILED", "BEST",
                                "OBJECTIVE", "GPU", "TIME"]
    assert lines[1].split() == ["cartpole-lr", "alice", "running", "16", "4", "3", "0", "1", "cartpole-lr-t003",
                                "471.80", "Train/mean_reward", "23.6", "GPU-min"]
    assert lines[2].split() == ["anymal-ent", "bob", "done", "8", "0", "1", "1", "0", "anymal-ent-t002", "0.913",
                                "Metrics/success_rate", "8.3", "GPU-h"]
    assert format_sweeps([]).startswith("no sweeps")


def test_the_status_carries_sweeps_only_when_there_are_some():
    assert "sweeps" not in Status().to_json()  # today's wire format, unchanged
    st = Status(sweeps=(example_status(),))
    back = Status.from_json(st.to_json())
    assert back.sweeps == st.sweeps


# ---- the commands (daemon/cli/sweep_cli.py), with a stand-in for the supervisor: what they send and print ---------

class Refused(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def run_cli(argv: list[str], answers: dict[str, object]) -> tuple[int, list[dict], list]:
    """`isaacd <argv>` parsed as main.py registers the sweep commands (its common --config/--socket parent), against
    a supervisor answering `answers[cmd]`: (exit code, the requests sent, the Client's args)."""
    import argparse

    from isaacd.cli import sweep_cli

    sent: list[dict] = []
    seen: list = []

    def client(args):  # main.Client(args)
        seen.append((args.config, args.socket))
        return lambda req: (sent.append(req), answers[req["cmd"]])[1]

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", "-c", default=argparse.SUPPRESS)
    common.add_argument("--socket", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="isaacd", parents=[common])
    sub = parser.add_subparsers(dest="command")
    for name, short, long in sweep_cli.COMMANDS:
        s = sub.add_parser(name, help=short, description=long, parents=[common])
        s.set_defaults(func=sweep_cli.sweep_arguments(name, s, client, Refused))
    args = parser.parse_args(argv)
    args.config, args.socket = getattr(args, "config", None), getattr(args, "socket", None)
    return args.func(args), sent, seen


def test_submit_checks_the_file_here_and_sends_nothing_when_it_is_bad(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(EXAMPLE.read_text().replace('{ loguniform = [1e-4, 1e-2] }', '{ lognormal = [1e-4, 1e-2] }'))
    try:
        run_cli(["sweep", "submit", str(bad)], {})
        raise AssertionError("a bad sweep file was sent")
    except Refused as exc:
        assert exc.code == 2
        assert str(bad) in str(exc) and "unknown distribution `lognormal`" in str(exc)


def test_submit_sends_the_file_and_prints_the_answer(tmp_path, capsys):
    good = tmp_path / "sweep.toml"
    good.write_text(EXAMPLE.read_text())
    answer = "sweep cartpole-lr: 16 trials submitted, 4 at once"
    code, sent, seen = run_cli(["sweep", "submit", str(good), "--socket", "/run/isaacd/other.sock"],
                               {"sweep-submit": answer})
    assert code == 0 and capsys.readouterr().out == answer + "\n"
    assert sent == [{"cmd": "sweep-submit", "text": EXAMPLE.read_text(), "source": str(good.resolve())}]
    assert seen == [(None, "/run/isaacd/other.sock")]  # the supervisor --socket names, given after the file


def test_best_prints_the_job_file_as_it_is(capsys):
    toml = '[[jobs]]\nname = "cartpole-lr-best"\ntask = "Isaac-Cartpole-Direct-v0"\n'
    code, sent, seen = run_cli(["--socket", "/s", "sweep", "best", "cartpole-lr"],
                               {"sweep-best": toml, "sweep-status": example_status().to_json()})
    assert capsys.readouterr().out == toml  # an ASHA sweep's: as the supervisor wrote it
    assert sent == [{"cmd": "sweep-status", "sweep": "cartpole-lr"}, {"cmd": "sweep-best", "sweep": "cartpole-lr"}]
    assert seen == [(None, "/s")]


def test_status_and_sweeps_render_the_supervisors_answer(capsys):
    raw = example_status().to_json()
    run_cli(["sweep", "status", "cartpole-lr"], {"sweep-status": raw})
    assert table(capsys.readouterr().out)[1][0] == "cartpole-lr-t003"  # the first row: the best
    run_cli(["sweep", "status", "cartpole-lr", "--json"], {"sweep-status": raw})
    import json
    assert json.loads(capsys.readouterr().out) == raw
    run_cli(["sweeps"], {"sweeps": [raw]})
    assert capsys.readouterr().out.splitlines()[1].startswith("cartpole-lr  alice  running")
    code, sent, _ = run_cli(["sweep", "cancel", "cartpole-lr"], {"sweep-cancel": "sweep cartpole-lr: cancelled"})
    assert sent == [{"cmd": "sweep-cancel", "sweep": "cartpole-lr"}]
    assert capsys.readouterr().out == "sweep cartpole-lr: cancelled\n"


def test_the_docs_show_the_table_as_the_renderer_prints_it():
    """docs/sweeps.md pastes this sweep's `isaacd sweep status` and `isaacd sweeps`: a change of the renderer
    re-pastes them."""
    blocks = doc_blocks()
    assert format_sweep(example_status(), NOW) + "\n" in blocks
    assert format_sweeps([example_status()]) + "\n" in blocks


def doc_blocks() -> list[str]:
    """docs/sweeps.md's fenced blocks, each as its text."""
    blocks: list[str] = []
    block: str | None = None  # the fenced block being read, None outside one
    for line in (EXAMPLE.parents[1] / "docs" / "sweeps.md").read_text().splitlines(keepends=True):
        if line.startswith("```") and block is None:
            block = ""
        elif line.startswith("```"):
            blocks.append(block)
            block = None
        elif block is not None:
            block += line
    return blocks


def test_a_population_shows_each_members_exploits_and_its_lineage():
    lr = "agent.algorithm.learning_rate"
    lineage = ({"at": 40, "from": 1, "from_job": "pop-t001", "from_iteration": 39, "old": {lr: 1.86e-05},
                "new": {lr: 0.000594}, "copied": True},)
    sw = SweepStatus(name="pop", state="running", trials_total=2, concurrency=2, scheduler="pbt", max_iterations=100,
                     interval=20, quantile=0.25, objective_tag="Train/mean_reward",
                     trials=(TrialStatus(1, "pop-t001", {lr: 0.000495}, "running", 45, 210.0),
                             TrialStatus(2, "pop-t002", {lr: 0.000594}, "running", 41, None, exploits=1,
                                         lineage=lineage, exploiting=False)))
    text = format_sweep(sw, now=0.0)
    assert ("scheduler pbt: 2 members train side by side to 100 iterations; every 20 iterations the bottom 25% copy "
            "a top 25% member's checkpoint and perturb its values") in text
    assert table(text)[0][-1] == "EXPLOITS"
    assert ("pop-t002 at iteration 40: copied pop-t001 (its checkpoint at iteration 39); learning_rate 1.86e-05 -> "
            "0.000594") in text
    again = SweepStatus.from_json(sw.to_json())
    assert again.trials[1].lineage == lineage and again.interval == 20


# ---- `isaacd sweep best` of a population (issue 40) ------------------------------------------------------------
LR = "agent.algorithm.learning_rate"
POPULATION = ('[sweep]\nname = "pop"\ntrials = 3\nseed = 1\n[sweep.scheduler]\nkind = "pbt"\ninterval = 20\n'
              '[sweep.space]\n"agent.algorithm.learning_rate" = { loguniform = [1e-5, 1e-3] }\n'
              '[job]\nworkflow = "rsl_rl"\ntask = "Isaac-Cartpole-Direct-v0"\nmax_iterations = 100\n'
              'gpu_memory = "6 GB"\nextra_args = ["agent.algorithm.schedule=fixed"]\n')


def exploit(time: float, at: int, source: int, from_iteration: int, old: float, new: float,
            copied: bool = True) -> dict:
    return {"time": time, "at": at, "from": source, "from_job": f"pop-t00{source}", "from_iteration": from_iteration,
            "old": {LR: old}, "new": {LR: new}, "copied": copied}


def population_status() -> SweepStatus:
    """Member 3 copied member 1 at iteration 20 (t=100), member 2 copied member 3 at 40 (t=200), member 1 copied
    member 2 at 60 (t=300, after member 2's copy: not in member 2's past). Member 2, at iteration 55, is the best."""
    t1 = TrialStatus(1, "pop-t001", {LR: 0.000864}, "running", 62, 300.0, exploits=1,
                     lineage=(exploit(300.0, 60, 2, 59, 0.0005, 0.000864),))
    t2 = TrialStatus(2, "pop-t002", {LR: 0.00072}, "running", 55, 420.0, exploits=1,
                     lineage=(exploit(200.0, 40, 3, 39, 0.0001, 0.00072),))
    t3 = TrialStatus(3, "pop-t003", {LR: 0.0006}, "running", 58, 380.0, exploits=1,
                     lineage=(exploit(100.0, 20, 1, 19, 0.001, 0.0006),))
    return SweepStatus(name="pop", state="running", trials_total=3, concurrency=3, scheduler="pbt",
                       max_iterations=100, interval=20, quantile=0.25, best=2, best_objective=420.0,
                       trials=(t2, t3, t1))


def test_a_members_schedule_follows_its_weights_back_through_each_copy_to_a_first_sample():
    from isaacd.cli.render_sweep import schedule

    sw = population_status()
    assert schedule(sw, 2) == [(0, 19, "pop-t001", {LR: 0.0005}), (19, 39, "pop-t003", {LR: 0.0006}),
                               (39, None, "pop-t002", {LR: 0.00072})]
    # member 1's weights went round: its own first sample's, member 3's, member 2's, then its own again
    assert schedule(sw, 1) == [(0, 19, "pop-t001", {LR: 0.0005}), (19, 39, "pop-t003", {LR: 0.0006}),
                               (39, 59, "pop-t002", {LR: 0.00072}), (59, None, "pop-t001", {LR: 0.000864})]
    # a copy that could not be made: the member kept its own weights and changed its values where it was judged
    failed = SweepStatus(name="pop", scheduler="pbt", trials=(TrialStatus(
        1, "pop-t001", {LR: 0.0002}, lineage=(exploit(50.0, 20, 2, 19, 0.0001, 0.0002, copied=False),)),))
    assert schedule(failed, 1) == [(0, 20, "pop-t001", {LR: 0.0001}), (20, None, "pop-t001", {LR: 0.0002})]
    # never exploited: its first sample all along
    assert schedule(sw, 9) == [] and schedule(SweepStatus(name="x", trials=(TrialStatus(1, "x-t1", {LR: 1e-4}),)),
                                                       1) == [(0, None, "x-t1", {LR: 1e-4})]


def test_best_of_a_population_is_its_job_file_with_its_schedule_and_newest_checkpoint(capsys):
    import sys

    from isaacd.status.types import CheckpointStatus, JobStatus
    from isaacd.sweeps.spec import parse_sweep
    from isaacd.sweeps.trial_file import best_job_file

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    spec = parse_sweep(POPULATION, "/home/ana/pop.toml", Path("/home/ana"))
    made = best_job_file(POPULATION, Path("/home/ana"), spec, 2, {LR: 0.00072})  # what the supervisor answers
    path = "/logs/rsl_rl/pop-t002/2026-12-06_11-04-30_pbt-from-pop-t003-at-39/model_55.pt"
    status = Status(jobs=(JobStatus("pop-t002", checkpoint=CheckpointStatus(55, path)), JobStatus("pop-t001")))
    answers = {"sweep-status": population_status().to_json(), "sweep-best": made, "status": status.to_json()}
    run_cli(["sweep", "best", "pop"], answers)
    out = capsys.readouterr().out
    assert tomllib.loads(out) == tomllib.loads(made)  # the same job: its values now, to submit
    assert out.startswith(made.partition("[[jobs]]")[0])  # the supervisor's header first
    comments = [line.removeprefix("# ") for line in out.splitlines() if line.startswith("#")]
    at = comments.index(next(c for c in comments if c.startswith("population-based training: pop-t002's weights")))
    assert [c.split() for c in comments[at + 2:at + 6]] == [
        ["ITERATIONS", "MEMBER", "learning_rate"], ["0-18", "pop-t001", "0.0005"], ["19-38", "pop-t003", "0.0006"],
        ["39-55", "(now)", "pop-t002", "0.00072"]]
    assert comments[at + 6:at + 8] == [
        "pop-t002's own exploits:",
        "  at iteration 40: copied pop-t003 (its checkpoint at iteration 39); learning_rate 0.0001 -> 0.00072"]
    assert f'checkpoint = "{path}"' in comments and any("(iteration 55)" in c for c in comments)
    # no checkpoint yet: said so, nothing made up
    answers["status"] = Status(jobs=(JobStatus("pop-t002"),)).to_json()
    run_cli(["sweep", "best", "pop"], answers)
    out = capsys.readouterr().out
    assert "# pop-t002 has no complete checkpoint yet" in out and "checkpoint =" not in out


def test_the_docs_show_a_populations_best_as_the_renderer_prints_it():
    """docs/sweeps.md's `isaacd sweep best pop` of its worked PBT example: member 6 copied member 3 at 50 (t=100),
    member 2 copied member 3 at 100 (t=200), member 6 copied member 2 at 150 (t=300)."""
    import re

    from isaacd.cli.render_sweep import population_best
    from isaacd.status.types import CheckpointStatus
    from isaacd.sweeps.spec import parse_sweep
    from isaacd.sweeps.trial_file import best_job_file

    doc = (EXAMPLE.parents[1] / "docs" / "sweeps.md").read_text()
    text = re.search(r"## Population-based training.*?```toml\n(.*?)```", doc, re.S).group(1)
    spec = parse_sweep(text, "/home/alice/pop.toml", Path("/home/alice"))
    ent = "agent.algorithm.entropy_coef"

    def ex(time: float, at: int, source: int, old: tuple[float, float], new: tuple[float, float]) -> dict:
        return {"time": time, "at": at, "from": source, "from_job": f"pop-t00{source}", "from_iteration": at - 1,
                "old": {LR: old[0], ent: old[1]}, "new": {LR: new[0], ent: new[1]}, "copied": True}
    t6 = TrialStatus(6, "pop-t006", {LR: 0.000712, ent: 0.00415}, "running", 212, 471.8, exploits=2,
                     lineage=(ex(100, 50, 3, (1.857e-05, 0.0112), (0.000396, 0.00519)),
                              ex(300, 150, 2, (0.000396, 0.00519), (0.000712, 0.00415))))
    t2 = TrialStatus(2, "pop-t002", {LR: 0.000594, ent: 0.00346}, "running", 210, 460.0, exploits=1,
                     lineage=(ex(200, 100, 3, (0.0001, 0.0151), (0.000594, 0.00346)),))
    t3 = TrialStatus(3, "pop-t003", {LR: 0.000495, ent: 0.00432}, "running", 208, 455.0)
    sw = SweepStatus(name="pop", scheduler="pbt", trials_total=8, best=6, trials=(t6, t2, t3))
    made = best_job_file(text, Path("/home/alice"), spec, 6, dict(t6.values))
    path = "/home/alice/logs/rsl_rl/pop-t006/2026-12-06_14-02-11_pbt-from-pop-t002-at-149/model_210.pt"
    assert population_best(made, sw, 6, CheckpointStatus(210, path)) in doc_blocks()
