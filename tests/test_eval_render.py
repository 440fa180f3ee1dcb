"""How evaluations read to a person (issue 41, cli/render_eval.py): the `eval:` line of `isaacd status`, the table of
`isaacd evals JOB`, the score line of `isaacd best JOB`. Pure: typed values in, the text a user reads out."""

from __future__ import annotations

from isaacd.cli.render_eval import best_score_line, eval_lines, format_evals, score
from isaacd.evals.types import EvalResult, EvalsStatus

NOW = 1_700_000_000.0


def result(it: int, mean: float, std: float = 12.3, success: float | None = None, video: str | None = None,
           finished: float = NOW - 60) -> EvalResult:
    return EvalResult(iteration=it, checkpoint=f"/runs/cartpole/2026-12-06_10-00-00/model_{it}.pt", episodes=100,
                      return_mean=mean, return_std=std, length_mean=299.0, length_std=1.5, success_rate=success,
                      seed=42, num_envs=100, device="cpu", duration_seconds=31.2, finished_at=finished, video=video)


def test_the_status_line_names_the_newest_and_the_best():
    ev = EvalsStatus(every="1", last=result(400, 487.1, 12.3), best=result(350, 495.4), where="cpu")
    assert eval_lines("cartpole", ev, NOW) == \
        "  cartpole eval: model_400.pt 487 ± 12 over 100 episodes; best model_350.pt 495"


def test_the_newest_being_the_best_is_said_once():
    ev = EvalsStatus(every="1", last=result(400, 487.1), best=result(400, 487.1), where="cpu")
    assert eval_lines("c", ev, NOW) == "  c eval: model_400.pt 487 ± 12 over 100 episodes, the best so far"


def test_a_paced_wait_says_when_the_next_comes_and_what_each_costs_and_a_past_one_says_nothing():
    ev = EvalsStatus(every="1", last=result(400, 487.1), best=result(400, 487.1), where="gpu 0 (4.0 GiB)",
                     cost_seconds=0.24, cost_share=0.0186, paced_until=NOW + 9.5)
    assert eval_lines("c", ev, NOW) == ("  c eval: model_400.pt 487 ± 12 over 100 episodes, the best so far; "
                                        "next in 9s (each costs the training 0.24 s)")
    assert "next in" not in eval_lines("c", ev, NOW + 10)


def test_success_rate_only_where_the_task_logs_one():
    ev = EvalsStatus(every="1", last=result(40, 0.8734, 0.05, success=0.93), best=result(40, 0.8734), where="cpu")
    assert "model_40.pt 0.87 ± 0.05, success 93% over 100 episodes" in eval_lines("a", ev, NOW)
    assert "success" not in eval_lines("a", EvalsStatus(every="1", last=result(40, 3.0), where="cpu"), NOW)


def test_nothing_yet_says_what_it_waits_for_and_where_it_runs():
    ev = EvalsStatus(every="best", where="gpu 0 (4.0 GiB)", running=150, running_since=NOW - 42, waiting=2)
    assert eval_lines("a", ev, NOW) == ("  a eval: none yet (every new best training reward, on gpu 0 (4.0 GiB)); "
                                        "evaluating iteration 150 for 42s, 2 waiting")
    assert "every 5th checkpoint, on cpu" in eval_lines("a", EvalsStatus(every="5", where="cpu"), NOW)


def test_failures_given_up_and_no_video_each_a_line_of_their_own():
    ev = EvalsStatus(every="1", last=result(400, 487.1), best=result(400, 487.1), where="cpu", failed=4,
                     given_up=(120, 140), last_error="checkpoint does not load: torn file",
                     video_unavailable="no renderer: Isaac Lab found no GPU on this host")
    lines = eval_lines("c", ev, NOW).splitlines()
    assert lines[1] == ("    eval gave up on iterations 120, 140; last failure: checkpoint does not load: torn file "
                        "(`isaacd events c`)")
    assert lines[2] == "    eval video unavailable: no renderer: Isaac Lab found no GPU on this host (scores only)"
    retried = EvalsStatus(every="1", where="cpu", failed=1, last_error="exit 1: CUDA error", running=120)
    assert eval_lines("c", retried, NOW).splitlines()[1] == "    eval 1 failed attempt in all; last: exit 1: CUDA error"
    cannot = EvalsStatus(every="1", where="cpu",
                         last_error='evaluations run with runtime = "process" (podman: not yet)')
    assert eval_lines("c", cannot, NOW).splitlines()[1] == \
        '    eval: evaluations run with runtime = "process" (podman: not yet)'


def test_a_plain_run_has_no_extra_lines():
    ev = EvalsStatus(every="1", last=result(400, 487.1), best=result(350, 495.4), where="cpu")
    assert len(eval_lines("c", ev, NOW).splitlines()) == 1


def test_scores_keep_the_means_decimals():
    assert (score(487.1), score(12.34, 487.1)) == ("487", "12")
    assert (score(48.71), score(1.234, 48.71)) == ("48.7", "1.2")
    assert (score(-3.5), score(0.25, -3.5)) == ("-3.50", "0.25")
    assert score(0.012) == "0.012" and score(None) == "-"


def test_the_evals_table_oldest_first_best_marked():
    rs = [result(100, 21.0, 3.0, finished=NOW - 300), result(200, 495.4, 4.0, video="/runs/e/videos/m200.mp4"),
          result(300, 487.1, 12.3)]
    text = format_evals("cartpole", rs, best=200, given_up=(250,), last_error="deadline: killed after 600 s")
    lines = text.splitlines()
    assert lines[0].split() == ["ITER", "CHECKPOINT", "RETURN", "LENGTH", "SUCCESS", "EPISODES", "WHEN", "DURATION"]
    assert [ln.split()[0] for ln in lines[1:4]] == ["100", "*", "300"]
    assert lines[2].split()[1:5] == ["200", "model_200.pt", "495", "±"]
    assert "31.2s" in lines[1] and "100" in lines[1].split()
    assert lines[4] == ("* best: /runs/cartpole/2026-12-06_10-00-00/model_200.pt (495 ± 4; "
                        "`isaacd best cartpole`)")
    assert "newest video: /runs/e/videos/m200.mp4" in text
    assert text.splitlines()[-1] == "given up: iteration 250: deadline: killed after 600 s"
    assert format_evals("c", [], None) == "c: no evaluation finished yet"
    assert format_evals("c", [], None, given_up=(5, 9), last_error="torn").splitlines()[-1] == \
        "given up: iterations 5, 9; the newest: torn"


def test_the_best_line():
    assert best_score_line("cartpole", result(350, 495.4, 4.0, success=1.0)) == \
        "cartpole: best model_350.pt (iteration 350): return 495 ± 4, success 100% over 100 episodes"


def test_isaacd_status_shows_the_line_under_the_job_and_only_for_jobs_with_evals():
    from isaacd.cli.render import format_status
    from isaacd.status.types import Status

    ev = EvalsStatus(every="1", last=result(400, 487.1), best=result(350, 495.4), where="cpu", running=450,
                     running_since=NOW - 5)
    raw = {"jobs": [{"name": "cartpole", "state": "running", "evals": ev.to_json()},
                    {"name": "plain", "state": "running"}]}  # the wire JSON, as `isaacd status` reads it
    text = format_status(Status.from_json(raw), now=NOW)
    evals = [ln for ln in text.splitlines() if " eval" in ln]
    assert evals == ["  cartpole eval: model_400.pt 487 ± 12 over 100 episodes; best model_350.pt 495; "
                     "evaluating iteration 450 for 5s"]
