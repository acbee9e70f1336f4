"""Vision-R1's commands, registered into the ``vlrl`` verb groups (data, eval).

Commands only parse flags, call this method's library code and print results; heavy imports happen
inside each command so ``vlrl --help`` stays fast. Each command is a plain function; :func:`register`
adds them to the groups.
"""

from __future__ import annotations

import typer

from vlrl.methods.options import JobFlags, MaxImagePixels, ResizeMaxPixels, job_command, long_job


@long_job
def cold_start_cmd(
    input: str = typer.Option(..., "--input", help="Records with image, question, answer (JSONL/parquet/dataset folder, or builtin:tiny_math)."),
    vlm: str = typer.Option(..., "--vlm", help="Backend spec of the VLM (writes pseudo-CoT and description)."),
    reasoner: str = typer.Option(..., "--reasoner", help="Backend spec of the text reasoner (solves from the description)."),
    out: str = typer.Option(..., "--out", help="Output folder (sft.jsonl, rejected.jsonl, quarantine.jsonl, stats.json, cache/)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Samples per backend call."),
    max_samples: int | None = typer.Option(None, "--max-samples", help="Stop after this many input records."),
    vlm_max_tokens: int = typer.Option(1024, "--vlm-max-tokens"),
    reasoner_max_tokens: int = typer.Option(8192, "--reasoner-max-tokens"),
    temperature: float = typer.Option(0.0, "--temperature"),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the records."),
    consistency_judge: str | None = typer.Option(None, "--consistency-judge", help="Backend spec of an LLM judge that "
                                                 "rejects logically inconsistent chains, as the paper filters them; "
                                                 "without it a chain like '3*2 = 5, so the answer is 6' is kept "
                                                 "when its final answer is right."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    import json

    from vlrl.core.jobs import exit_code
    from vlrl.methods.vision_r1.cold_start import cold_start

    stats = job_command(
        "data cold-start", out, params, lambda: cold_start(
            input, vlm, reasoner, out, batch_size=batch_size, max_samples=max_samples,
            vlm_max_tokens=vlm_max_tokens, reasoner_max_tokens=reasoner_max_tokens,
            temperature=temperature, shard=shard, consistency_judge=consistency_judge,
        ), specs=[vlm, reasoner, *([consistency_judge] if consistency_judge else [])], ignore=("shard",),
        quarantine=["quarantine.jsonl"], outputs=["sft.jsonl", "rejected.jsonl", "quarantine.jsonl", "stats.json"],
    )
    typer.echo(json.dumps(stats, indent=2))
    if stats.get("failed_this_run"):
        typer.echo(f"{stats['failed_this_run']} record(s) failed in a backend; rerun the same command to retry them", err=True)
    done = stats.get("kept", 0) + stats.get("rejected", 0) + stats.get("quarantined", 0)  # a failure is not done
    code = exit_code(done, stats.get("failed_this_run", 0))
    if code:
        raise typer.Exit(code)


def reasoning_cmd(
    model: str = typer.Option(..., "--model", help="Backend spec of the model under test (hf:PATH or openai:URL@MODEL)."),
    bench: str = typer.Option(..., "--bench", help="Benchmark records: image, question, answer, optional choices (file, dataset folder, builtin:tiny_math)."),
    out: str = typer.Option(..., "--out", help="Output folder (predictions.jsonl, metrics.json, cache/)."),
    max_tokens: int = typer.Option(4096, "--max-tokens", help="Generation budget; outputs that hit it count as truncated."),
    temperature: float = typer.Option(0.0, "--temperature"),
    batch_size: int = typer.Option(16, "--batch-size"),
    limit: int | None = typer.Option(None, "--limit", help="Evaluate only the first N items."),
    group_by: str | None = typer.Option(None, "--group-by", help="Record field to report accuracy by (default: task/category if present)."),
    prompt: str = typer.Option("reasoning_eval", "--prompt", help="Prompt template name or .jinja path."),
    samples: int = typer.Option(0, "--samples", min=0, help="Also draw N answers per item at --sample-temperature and report pass_at_k (k = 1, 4, 8 up to N; unbiased) and sampled_right_share (right samples where greedy is right, and where it is wrong)."),
    sample_temperature: float = typer.Option(1.0, "--sample-temperature", help="Temperature of the --samples draws (the rollout temperature)."),
    max_image_pixels: MaxImagePixels = None,
    resize_max_pixels: ResizeMaxPixels = None,
) -> None:
    params = dict(locals())
    import json

    from vlrl.core.images import image_limits_of
    from vlrl.methods.vision_r1.evaluate import evaluate_reasoning

    try:
        from vlrl.core.jobs import exit_code, preflight

        preflight(model)
        with image_limits_of(params):
            metrics = evaluate_reasoning(model, bench, out, max_tokens=max_tokens, temperature=temperature,
                                         batch_size=batch_size, limit=limit, group_by=group_by, prompt=prompt,
                                         samples=samples, sample_temperature=sample_temperature)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl eval reasoning: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(metrics, indent=2, default=str))
    if metrics["unscored"]:
        typer.echo(f"vlrl eval reasoning: {metrics['unscored']} item(s) failed in the backend and are left unscored "
                   "(accuracy is over the rest); rerun the same command to score them", err=True)
    code = exit_code(metrics.get("n", 0), metrics["unscored"])
    if code:
        raise typer.Exit(code)


def register(groups: dict[str, typer.Typer]) -> None:
    """Add this method's commands to the ``vlrl`` verb groups (``groups["data"]`` is ``vlrl data``)."""
    data, evals = groups["data"], groups["eval"]
    data.command("cold-start", help="Vision-R1 cold start: VLM pseudo-CoT → description → text reasoner; keep verified <think>/<answer> samples.")(cold_start_cmd)
    evals.command("reasoning", help="MathVista-style reasoning eval: accuracy (HFRRF's answer extraction), format failures, lengths.")(reasoning_cmd)
