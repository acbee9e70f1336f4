"""The ``vlrl bench ...`` commands: parse flags, run a bench of this package, write its JSON, print its ratios."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

app = typer.Typer(no_args_is_help=True)

BENCH_ERRORS = (OSError, ValueError, RuntimeError)
"""Bad flags, a missing file, or a child run that failed (its stderr tail in the message)."""


def run_bench(name: str, bench: Callable[[], dict[str, Any]], json_out: str,
              errors: tuple[type[BaseException], ...] = BENCH_ERRORS) -> dict[str, Any]:
    """Run one bench; an expected failure is one line and exit 2, the numbers go to ``json_out``."""
    import json

    from vlrl.core.pipeline import atomic_open

    try:
        res = bench()
    except errors as e:
        typer.echo(f"vlrl bench {name}: {e}", err=True)
        raise typer.Exit(2) from None
    with atomic_open(json_out) as fh:
        fh.write(json.dumps(res, indent=2) + "\n")
    return res


@app.command("caption", help="Images/s (--videos: videos/s) of batched `vlrl caption` vs one-at-a-time generate, and peak RSS vs corpus size.")
def bench_caption_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    model: str | None = typer.Option(None, "--model", help="VLM folder (default: build the tiny Qwen2.5-VL)."),
    images: int = typer.Option(64, "--images", help="Images (videos) in the small corpus (the large one has 10x)."),
    videos: bool = typer.Option(False, "--videos", help="Caption generated video clips instead of images (vlrl caption --videos)."),
    batch_size: int = typer.Option(32, "--batch-size"),
    max_tokens: int = typer.Option(32, "--max-tokens"),
    threads: int | None = typer.Option(None, "--threads", help="OMP_NUM_THREADS for both sides (default: inherit)."),
) -> None:
    from vlrl.bench.caption import bench_caption

    res = run_bench("caption", lambda: bench_caption(model=model, n_images=images, batch_size=batch_size,
                                                     max_tokens=max_tokens, threads=threads, media="video" if videos else "image"),
                    json_out, errors=(ValueError, RuntimeError))
    unit, what = ("video/s", "videos") if videos else ("img/s", "images")
    typer.echo(f"batched (vlrl caption): {res['batched_images_per_s']:.2f} {unit}")
    typer.echo(f"single (plain generate): {res['single_images_per_s']:.2f} {unit}")
    if videos:
        typer.echo(f"prompt tokens per video: {res['batched_prompt_tokens']:.0f} batched, {res['single_prompt_tokens']:.0f} single")
    grow = res["peak_rss_mb_large"] / res["peak_rss_mb_small"] - 1
    typer.echo(f"peak RSS: {res['peak_rss_mb_small']:.0f} MB small, {res['peak_rss_mb_large']:.0f} MB on 10x the {what} ({grow:+.1%})")
    typer.echo(f"speedup: {res['speedup']:.2f}x")


@app.command("reward", help="caprl_qa throughput and spread: sample mode (N=4) vs exact mode on the same backend.")
def bench_reward_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    answerer: str | None = typer.Option(None, "--answerer", help="Answerer backend spec (default: build a tiny Qwen2, hf: backend)."),
    captions: int = typer.Option(16, "--captions", help="Captions scored per repeat."),
    repeats: int = typer.Option(3, "--repeats", help="Repeats per mode (interleaved)."),
    questions_per_caption: int = typer.Option(8, "--questions-per-caption", help="Q: questions drawn per caption."),
    rounds: int = typer.Option(4, "--rounds", help="N: shuffled rounds per question (measured beside the shipped recipe's N=1)."),
    grpo_steps: int = typer.Option(3, "--grpo-steps", min=0, help="Steps of the tiny GRPO recipe timed for the reward's share of a step (0: skip)."),
    qa: str | None = typer.Option(None, "--qa", help='JSONL rows {"caption", "questions"} scored instead of the synthetic captions (`vlrl demo --bench-inputs DIR` writes the CapRL demo\'s, for its trained answerer).'),
    setting: list[str] = typer.Option([], "--set", "-s", help="caprl_qa setting KEY=VALUE for both modes (e.g. prompt=shapes_answer); repeatable."),
) -> None:
    from vlrl.bench.reward import bench_reward

    def bench() -> dict[str, Any]:
        from vlrl.core.pipeline import read_jsonl
        from vlrl.rewards.scoring import parse_setting_pairs

        rows = list(read_jsonl(qa)) if qa else None
        res = bench_reward(answerer, n_captions=captions, repeats=repeats, questions_per_caption=questions_per_caption,
                           rounds=rounds, rows=rows, settings=parse_setting_pairs(setting))
        if grpo_steps > 0:
            from vlrl.bench.grpo_share import grpo_reward_share

            res["grpo_step_share"] = grpo_reward_share(grpo_steps)
        return res

    res = run_bench("reward", bench, json_out)
    for key, block in res["by_rounds"].items():
        for mode in ("sample", "exact"):
            r = block[mode]
            std, mean = r["reward_std_across_repeats"], r["mean_reward"]
            typer.echo(f"{key} {mode:>6}: {r['captions_per_s']:.2f} captions/s, reward std across seeds "
                       f"{'n/a' if std is None else f'{std:.4f}'}, mean reward {'n/a' if mean is None else f'{mean:.3f}'}")
        sr = block["spread_ratio"]
        typer.echo(f"{key} throughput ratio (exact/sample): {block['throughput_ratio']:.2f}x, spread ratio "
                   f"{'n/a' if sr is None else f'{sr:.3f}'}")
        gap = block.get("exact_vs_sample") or {}
        if gap.get("mean_gap") is not None:
            typer.echo(f"{key} exact - sample reward per caption: mean {gap['mean_gap']:+.4f}, mean |gap| "
                       f"{gap['mean_abs_gap']:.4f} at mean letter mass {gap['mean_letter_mass']:.3f}")
    for mode, g in (res.get("grpo_step_share") or {}).items():
        if isinstance(g, dict):
            typer.echo(f"tiny GRPO ({mode}): reward {g['reward_seconds']}s of {g['train_seconds']}s "
                       f"({g['reward_share']:.0%})")


@app.command("qa-write", help="Peak memory of writing the curated QA dataset at 1x and 10x corpus size (streamed write).")
def bench_qa_write_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    images: int = typer.Option(40, "--images", min=1, help="Images in the small corpus."),
    scale: int = typer.Option(10, "--scale", min=2, help="The large corpus is this many times larger."),
    side: int = typer.Option(384, "--side", min=8, help="Side of the random-noise PNGs, in pixels."),
) -> None:
    from vlrl.bench.qa_write import bench_qa_write

    res = run_bench("qa-write", lambda: bench_qa_write(images, scale, side), json_out)
    for r in res["runs"]:
        typer.echo(f"{r['images']:>6} images ({r['image_mb']} MB): peak RSS {r['rss_peak_mb']} MB "
                   f"(+{r['write_peak_growth_mb']} MB during the write)")
    typer.echo(f"corpus x{res['corpus_ratio']}, peak RSS x{res['peak_ratio']}")


@app.command("paths", help="Every other batched model path (qa-curate, teacher captions, Prism, caption-QA, exact reward): batched vs one request at a time.")
def bench_paths_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    vlm: str | None = typer.Option(None, "--vlm", help="VLM backend spec (default: build the tiny Qwen2.5-VL)."),
    answerer: str | None = typer.Option(None, "--answerer", help="Text answerer backend spec (default: build a tiny Qwen2)."),
    images: int = typer.Option(8, "--images", min=2, help="Images (and QA rows) per path."),
    only: list[str] = typer.Option([], "--only", help="Run only this path (repeatable)."),
) -> None:
    from vlrl.bench.paths import bench_paths

    res = run_bench("paths", lambda: bench_paths(vlm, answerer, images=images, only=only or None), json_out)
    for name, roles in res["paths"].items():
        for role, r in roles.items():
            b, s = r["batched"], r["single"]
            sp = "n/a" if r["speedup"] is None else f"{r['speedup']:.2f}x"
            typer.echo(f"{name:>16} {role:>9}: batched {b['model_seconds']:.3f}s ({b['requests_per_call']} requests/call), "
                       f"one at a time {s['model_seconds']:.3f}s, speedup {sp}")


@app.command("guards", help="Cost of the cheap guard layer: captions/s and the median per caption (goal: 1 ms or less).")
def bench_guards_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    input: str | None = typer.Option(None, "--input", help="JSONL of captions (default: seeded synthetic captions)."),
    text_column: str = typer.Option("caption", "--text-column", help="Caption field of --input rows."),
    captions: int = typer.Option(2000, "--captions", min=1, help="Synthetic captions (without --input)."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    from vlrl.bench.guards import bench_guards

    res = run_bench("guards", lambda: bench_guards(input, captions, seed, text_column), json_out)
    typer.echo(f"{res['captions']} captions (median {res['words_median']} words): {res['captions_per_s']:.0f} captions/s, "
               f"median {res['median_ms']:.3f} ms, p90 {res['p90_ms']:.3f} ms per caption")
    typer.echo(f"preparing the views: median {res['prepare']['median_ms']:.3f} ms; per guard: "
               + ", ".join(f"{k} {v['median_ms']:.3f}" for k, v in res["per_guard"].items()))
    pre = res["prefilters"]
    typer.echo(f"literal prefilters (same verdicts), {pre['captions']} captions timed alternately: median "
               f"{pre['median_ms_on']:.3f} ms on, {pre['median_ms_off']:.3f} ms off ({pre['speedup']:.1f}x)")
    if (bare := res["without_learned"]) is not None:
        typer.echo(f"without the learned guard, passes alternated: median {bare['median_ms']:.3f} ms (the learned guard "
                   f"alone {res['learned']['median_ms']:.3f} ms, {100 * bare['learned_share']:.0f}% of the layer)")


@app.command("serve", help="Reward service vs in-process scoring on one backend: rows/s, p50/p99 latency, batching gain (1 vs 8 clients).")
def bench_serve_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    answerer: str | None = typer.Option(None, "--answerer", help="Answerer backend spec (default: build a tiny Qwen2, hf: backend)."),
    rows: int = typer.Option(96, "--rows", help="Rows scored per side per repeat."),
    request_rows: int = typer.Option(8, "--request-rows", help="Rows per request (a trainer's micro-batch)."),
    clients: int = typer.Option(8, "--clients", help="Concurrent clients on the batched side."),
    repeats: int = typer.Option(2, "--repeats", help="Repeats per side (interleaved)."),
    max_batch_rows: int = typer.Option(64, "--max-batch-rows"),
    max_wait_ms: float = typer.Option(20.0, "--max-wait-ms"),
) -> None:
    from vlrl.bench.serve import bench_serve

    res = run_bench("serve", lambda: bench_serve(answerer=answerer, n_rows=rows, request_rows=request_rows, clients=clients,
                                                 repeats=repeats, max_batch_rows=max_batch_rows, max_wait_ms=max_wait_ms),
                    json_out)
    for side in ("in_process", "service_1_client", "service_8_clients"):
        r = res[side]
        typer.echo(f"{side:>18}: {r['rows_per_s']:.2f} rows/s, request latency p50 {r['latency_p50_s']:.3f}s "
                   f"p99 {r['latency_p99_s']:.3f}s ({r['requests']} requests)")
    typer.echo(f"service vs in-process (1 client): {res['service_vs_in_process']:.2f}x")
    typer.echo(f"batching gain ({clients} clients vs 1): {res['batching_gain']:.2f}x "
               f"(mean {res['service_8_clients']['mean_rows_per_reward_call']} rows per reward call)")
