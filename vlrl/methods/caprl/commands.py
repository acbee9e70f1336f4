"""CapRL's commands, registered into the ``vlrl`` verb groups (data, eval, reward).

Commands only parse flags, call this method's library code and print results; heavy imports happen
inside each command so ``vlrl --help`` stays fast. Each command is a plain function; :func:`register`
adds them to the groups.
"""

from __future__ import annotations

from pathlib import Path

import typer

from vlrl.methods.options import (
    RESIZE_MAX_PIXELS_HELP,
    JobFlags,
    MaxImagePixels,
    ResizeMaxPixels,
    command_errors,
    job_command,
    long_job,
)


@long_job(image_flags=False, force="Start over: remove this shard's records, the dataset and stats first.",
          retry_quarantined="Process images quarantined by earlier runs again.")
def qa_curate_cmd(
    images: str | None = typer.Option(None, "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    videos: str | None = typer.Option(None, "--videos", help="Video folder, or JSONL/parquet manifest or save_to_disk folder with a videos column: "
                                                              "MCQs about each video, filtered with and without it (CapRL++)."),
    vlm: str = typer.Option(..., "--vlm", help="Backend spec of the VLM that writes the questions (and answers them with the image unless --filter-vlm)."),
    filter_vlm: str | None = typer.Option(None, "--filter-vlm", help="Backend spec of the (small) VLM that answers with the image in the filter; default: --vlm."),
    answerer: str = typer.Option(..., "--answerer", help="Backend spec of the text-only answerer (no image)."),
    out: str = typer.Option(..., "--out", help="Output folder (dataset/, stats.json, records/, cache/)."),
    per_image: int = typer.Option(5, "--per-image", help="Questions to generate per image."),
    rounds: int = typer.Option(4, "--rounds", help="Shuffled answering rounds per question and filter half."),
    visual_min: float = typer.Option(0.75, "--visual-min", help="Keep if accuracy with the image is above this."),
    text_max: float = typer.Option(0.25, "--text-max", help="Keep if text-only accuracy is below this."),
    chance_floor: bool = typer.Option(True, "--chance-floor/--no-chance-floor",
                                      help="Also keep a question whose text-only accuracy is at most chance, ceil(R/k)/R "
                                           "(a blind answerer then keeps questions); --no-chance-floor is the paper's rule."),
    batch_size: int = typer.Option(8, "--batch-size", help="Images per backend call."),
    temperature: float = typer.Option(0.1, "--temperature", help="VLM sampling temperature for question writing."),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="Token limit of the question-writing answer."),
    seed: int = typer.Option(0, "--seed", help="Seed of generation sampling and option shuffles."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
    max_attempts: int = typer.Option(3, "--max-attempts", min=1, help="Runs an image may fail (or yield no question) before it is written as it stands."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    max_pixels: int | None = typer.Option(None, "--max-pixels", "--resize-max-pixels", help=RESIZE_MAX_PIXELS_HELP),
    max_image_pixels: MaxImagePixels = None,
    job: JobFlags = JobFlags(),
) -> None:
    import json

    from vlrl.core.jobs import EXIT_FAILED, exit_code
    from vlrl.core.pipeline import parse_shard
    from vlrl.methods.caprl.curate import CurateConfig, curate

    cfg = CurateConfig(per_image=per_image, rounds=rounds, visual_min=visual_min, text_max=text_max, chance_floor=chance_floor,
                       batch_size=batch_size, temperature=temperature, max_tokens=max_tokens, seed=seed, max_pixels=max_pixels,
                       max_attempts=max_attempts, media="video" if videos else "image",
                       **({} if max_image_pixels is None else {"max_image_pixels": max_image_pixels or None}))
    with command_errors("data qa-curate"):
        if (images is None) == (videos is None):
            raise ValueError("give --images or --videos (one of them)")
        stats = curate(images or videos, vlm, answerer, out, cfg, shard=parse_shard(shard), progress=not quiet, force=job.force,
                       retry_quarantined=job.retry_quarantined, max_consecutive_failures=job.max_consecutive_failures,
                       filter_vlm=filter_vlm)
    typer.echo(json.dumps({k: v for k, v in stats.items() if k != "settings"}, indent=2))
    failed = stats.get("failed_this_run", 0)
    if not stats["images_pending"] and not stats["kept"]:
        typer.echo(f"vlrl data qa-curate: the dataset in {out}/dataset is empty (no question passed the filters; "
                   "see drop_reasons above)", err=True)
        raise typer.Exit(EXIT_FAILED)
    if failed:
        typer.echo(f"{failed} image(s) failed in the backend; rerun the same command to retry them", err=True)
    code = exit_code(stats["images_done"] + stats["images_quarantined"], failed)
    if code:
        raise typer.Exit(code)


def export_cmd(
    input: str = typer.Option(..., "--input", help="QA dataset (output of `vlrl data qa-curate`, its dataset/ folder)."),
    out: str = typer.Option(..., "--out", help="Output file: .parquet (image bytes inline) or .jsonl (image paths)."),
    fmt: str = typer.Option("caprl", "--format", help="Output layout; 'caprl' (prompt, image, data_source, reward_model)."),
    prompt: str | None = typer.Option(None, "--prompt", help="The rows' user prompt (default: '<image> ' + CapRL's captioning prompt)."),
) -> None:
    import json

    from vlrl.methods.caprl.export import export_caprl

    if fmt != "caprl":
        typer.echo(f"vlrl data export: --format {fmt!r} is not known; use caprl", err=True)
        raise typer.Exit(2)
    try:
        res = export_caprl(input, out, prompt=prompt)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data export: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(res, indent=2))

def smoke_cmd(
    qa: str | None = typer.Option(None, "--qa", help="caprl_qa: QA dataset (output of `vlrl data qa-curate`, its dataset/ folder)."),
    captioner: str | None = typer.Option(None, "--captioner", help="caprl_qa: backend spec of the captioner."),
    answerer: str | None = typer.Option(None, "--answerer", help="caprl_qa: backend spec of the text-only answerer."),
    mode: str = typer.Option("exact", "--mode", help="caprl_qa mode: exact or sample."),
    limit: int = typer.Option(
        256, "--limit", min=0, help="Use only the first N images (0: all). A sample is enough; the whole corpus is held in memory."
    ),
    questions_per_caption: int = typer.Option(8, "--questions-per-caption", help="Q: questions drawn per caption."),
    rounds: int = typer.Option(4, "--rounds", help="N: shuffled rounds per question."),
    out: str = typer.Option("smoke.json", "--out", help="Where to write the JSON summary."),
    cache: str | None = typer.Option(None, "--cache", help="Response cache folder."),
    strict: bool = typer.Option(False, "--strict", help="caprl_qa: exit with status 1 when the check fails."),
    reward_name: str = typer.Option("caprl_qa", "--reward", help="Which reward to check: caprl_qa or rubicap_rubric."),
    rubrics: str | None = typer.Option(None, "--rubrics", help="rubicap_rubric: rubrics.jsonl (or its folder) from `vlrl data rubrics`."),
    judge: str | None = typer.Option(None, "--judge", help="rubicap_rubric: backend spec of the rubric judge."),
    setting: list[str] = typer.Option([], "--set", help="rubicap_rubric: judge setting KEY=VALUE (e.g. votes=3); repeatable."),
    drop: bool = typer.Option(False, "--drop", help="rubicap_rubric: also write rubrics.discriminating.jsonl without the rubrics that do not discriminate."),
    margin: float = typer.Option(0.05, "--margin", help="caprl_qa: real captions must beat each baseline by more than this (paired mean)."),
    chance_margin: float = typer.Option(0.05, "--chance-margin", help="caprl_qa: real accuracy must exceed chance, 1/(options+1), by this."),
    seed: int = typer.Option(0, "--seed", help="caprl_qa: seed of the reward's draws and of the bootstrap."),
    caption_max_tokens: int = typer.Option(512, "--caption-max-tokens", min=1, help="caprl_qa: Caption length limit in tokens (captions that stop at it are counted as truncated)."),
    max_image_pixels: MaxImagePixels = None,
    resize_max_pixels: ResizeMaxPixels = None,
) -> None:
    from vlrl.core.images import image_limits_of

    with image_limits_of({"max_image_pixels": max_image_pixels, "resize_max_pixels": resize_max_pixels}):
        _smoke_caprl_qa(qa=qa, captioner=captioner, answerer=answerer, mode=mode, limit=limit,
               questions_per_caption=questions_per_caption, rounds=rounds, out=out, cache=cache, strict=strict,
               reward_name=reward_name, rubrics=rubrics, judge=judge, setting=setting, drop=drop,
               margin=margin, chance_margin=chance_margin, seed=seed, caption_max_tokens=caption_max_tokens)

def _smoke_caprl_qa(*, qa, captioner, answerer, mode, limit, questions_per_caption, rounds, out, cache, strict,
           reward_name, rubrics, judge, setting, drop, margin, chance_margin, seed, caption_max_tokens=512) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from vlrl.core.pipeline import atomic_write_json

    if reward_name != "caprl_qa":
        _smoke_other(reward_name, rubrics=rubrics, judge=judge, setting=setting, limit=limit, out=out, drop=drop,
                     cache=cache)
        return
    missing = [f for f, v in (("--qa", qa), ("--captioner", captioner), ("--answerer", answerer)) if not v]
    if missing:
        typer.echo(f"vlrl reward smoke: caprl_qa needs {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    from vlrl.core.backends import BackendError
    from vlrl.core.jobs import EXIT_FAILED, exit_code
    from vlrl.methods.caprl.smoke import smoke_check

    try:
        summary = smoke_check(qa, captioner, answerer, mode=mode, limit=limit or None, questions_per_caption=questions_per_caption,
                              rounds=rounds, cache=cache, margin=margin, chance_margin=chance_margin, seed=seed,
                              max_tokens=caption_max_tokens)
    except BackendError as e:  # recorded too: a pipeline that reads --out sees why, not a stale pass
        atomic_write_json(out, {"passed": False, "failures": [str(e)], "backend_failed": True})
        typer.echo(f"vlrl reward smoke: {e}", err=True)
        raise typer.Exit(EXIT_FAILED) from None
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl reward smoke: {e}", err=True)
        raise typer.Exit(2) from None
    atomic_write_json(out, summary)
    console = Console()
    table = Table(title=f"caprl_qa ({mode}) on {summary['images']} images")
    for col in ("captions", "mean reward", "cannot answer", "None", "real − this [95% CI]"):
        table.add_column(col)
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    for name, v in summary["variants"].items():
        c = summary.get("comparisons", {}).get(name)
        ci = "" if not c or c["diff"] is None else f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
        table.add_row(name, fmt(v["mean"]), fmt(v["cannot_answer_rate"]), str(v["none"]), ci)
    console.print(table)
    console.print(f"chance {fmt(summary.get('chance'))}, letter mass {fmt(summary.get('letter_mass'))}, "
                  f"parse failures {fmt(summary.get('parse_failure_rate'))}")
    if summary["passed"]:
        console.print(f"[green]smoke check passed[/green]: real captions beat generic, empty and shuffled -> {out}")
    else:
        console.print(Panel("\n".join(summary["failures"]) + "\n\nThe reward or the QA data is broken: the answerer can "
                            "answer without the caption, ignores it, or answers are mis-parsed. Do not train on this.",
                            title="WARNING: caprl_qa smoke check FAILED", style="bold red"))
        if strict:
            raise typer.Exit(1)
    if summary["backend_failed"]:  # the verdict is over fewer captions than asked: the exit code says so
        typer.echo(f"vlrl reward smoke: {summary['backend_failed']} caption(s) failed in a backend and are not in "
                   "the numbers above; rerun the same command when the backends are healthy", err=True)
        raise typer.Exit(exit_code(summary["scored"], summary["backend_failed"]) or EXIT_FAILED)

def _smoke_other(reward_name: str, **options) -> None:
    """Another method's check, found by reward name (methods never import each other)."""
    import json

    from rich.console import Console

    from vlrl.rewards.smoke import get_smoke

    try:
        check = get_smoke(reward_name)
        summary = check(**options)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl reward smoke: {e}", err=True)
        raise typer.Exit(2) from None
    console = Console()
    shown = {k: v for k, v in summary.items() if k not in ("per_rubric", "failures")}
    console.print_json(json.dumps(shown, default=str))
    if not summary["passed"]:
        console.print("[bold red]smoke check FAILED[/bold red]: " + "; ".join(summary["failures"]))
        raise typer.Exit(1)
    console.print(f"[green]smoke check passed[/green] -> {options.get('out')}")


@long_job
def prism_cmd(
    captioner: str = typer.Option(..., "--captioner", help="Backend spec of the captioner under test."),
    answerer: str = typer.Option(..., "--answerer", help="Backend spec of the text-only answerer."),
    bench: str | None = typer.Option(None, "--bench", help="Benchmark JSONL file or dataset folder (format: docs/prism.md)."),
    videos: str | None = typer.Option(None, "--videos", help="Video benchmark (video Prism): JSONL file or dataset folder whose rows name a video (docs/prism.md)."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, predictions.jsonl, captions.jsonl, cache/)."),
    limit: int | None = typer.Option(None, "--limit", help="Evaluate only the first N questions."),
    caption_max_tokens: int = typer.Option(2048, "--caption-max-tokens", help="Caption length limit in tokens (captions that hit it are marked truncated)."),
    captions_per_image: int = typer.Option(1, "--captions-per-image", min=1, help="Sampled captions per image (1: one greedy caption); mean and best-of-N are reported."),
    caption_temperature: float = typer.Option(0.7, "--caption-temperature", help="Sampling temperature when --captions-per-image > 1."),
    answer_mode: str = typer.Option("direct", "--answer-mode", help="direct (short answer) or reason (think, then \\boxed{} answer checked with math-verify)."),
    answer_temperature: float = typer.Option(0.0, "--answer-temperature", help="Sampling temperature of the reasoning answerer (--answer-mode reason)."),
    reason_max_tokens: int = typer.Option(1024, "--reason-max-tokens", help="Token budget of the reasoning answerer."),
    numeric_scales: str = typer.Option("percent", "--numeric-scales", help="percent (x100/x0.01 tried only when a %% is written) or public (tried on every number)."),
    preset: str | None = typer.Option(None, "--preset", help="caprl_public: the public CapRL evaluation (4 captions at T=1.0, a reasoning answerer at T=1.0 with 2,048 tokens, public numeric scaling); flags set to other values than their defaults win."),
    seed: int = typer.Option(0, "--seed", help="Seed of caption sampling."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not use the response cache in OUT/cache."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    if videos is None:
        params.pop("videos")  # an image run's identity is what it was before video Prism
    if (bench is None) == (videos is None):
        typer.echo("vlrl eval prism: give --bench or --videos (one of them)", err=True)
        raise typer.Exit(2)
    from vlrl.methods.caprl.prism import evaluate_prism

    if preset is not None:  # resolved before the identity is taken: a preset run is its settings
        params.update(_prism_preset(preset, params))
        captions_per_image, caption_temperature = params["captions_per_image"], params["caption_temperature"]
        answer_mode, answer_temperature = params["answer_mode"], params["answer_temperature"]
        reason_max_tokens, numeric_scales = params["reason_max_tokens"], params["numeric_scales"]
    from rich.console import Console
    from rich.table import Table

    res = job_command(
        "eval prism", out, params, lambda: evaluate_prism(
            captioner, answerer, bench or videos, out, limit=limit, media="video" if videos else "image", caption_max_tokens=caption_max_tokens,
            cache=not no_cache, progress=not quiet, captions_per_image=captions_per_image,
            caption_temperature=caption_temperature, answer_mode=answer_mode, seed=seed,
            answer_temperature=answer_temperature, reason_max_tokens=reason_max_tokens, numeric_scales=numeric_scales,
        ), specs=[captioner, answerer], outputs=["results.json", "predictions.jsonl", "captions.jsonl", "state/*.json*"],
        quarantine=["state/bad_images.jsonl"],
    )
    table = Table(title=f"Prism-style accuracy ({res['n']} questions, {res['images']} images)")
    for col in ("benchmark", "n", "accuracy", "best-of-N", "by type", "errors"):
        table.add_column(col)
    for name, b in res["benchmarks"].items():
        by_type = ", ".join(f"{t} {v:.3f}" for t, v in b["by_type"].items())
        table.add_row(name, str(b["n"]), f"{b['accuracy']:.3f}", f"{b['best_of_n']:.3f}", by_type, str(b["errors"]))
    table.add_row("overall", str(res["n"]), f"{res['overall']:.3f}" if res["overall"] is not None else "n/a",
                  f"{res['best_of_n']:.3f}" if res["best_of_n"] is not None else "n/a",
                  f"macro {res['macro']:.3f}" if res["macro"] is not None else "", str(res["errors"]))
    Console().print(table)
    typer.echo(f"results -> {out}/results.json")
    _prism_exit(Path(out), res["n"])


_PRISM_DEFAULTS = {"captions_per_image": 1, "caption_temperature": 0.7, "answer_mode": "direct",
                   "answer_temperature": 0.0, "reason_max_tokens": 1024, "numeric_scales": "percent"}


def _prism_preset(name: str, given: dict) -> dict:
    """The preset's settings, except where a flag was set to another value than its default."""
    from vlrl.methods.caprl.prism import PRESETS

    if name not in PRESETS:
        typer.echo(f"vlrl eval prism: unknown preset {name!r}; known: {', '.join(PRESETS)}", err=True)
        raise typer.Exit(2)
    return {k: (PRESETS[name][k] if given[k] == d else given[k]) for k, d in _PRISM_DEFAULTS.items()}


def _prism_exit(out: Path, n: int) -> None:
    """Exit as the README's table says. Accuracy counts a failed question as wrong (and reports
    ``errors``), so only the exit code tells a pipeline that the number is degraded: a question
    whose captioner or answerer failed is a failure (3, or 1 when none succeeded); one whose image
    is unreadable (``state/bad_images.jsonl``) or whose question is malformed is an input problem."""
    from vlrl.core.jobs import exit_code
    from vlrl.core.pipeline import read_jsonl

    bad_images = out / "state" / "bad_images.jsonl"
    inputs = {r.get("reason") for r in read_jsonl(bad_images, on_error="skip")} if bad_images.is_file() else set()
    failed = sum(1 for p in read_jsonl(out / "predictions.jsonl", on_error="skip")
                 if p.get("error") and p["error"] not in inputs and not str(p["error"]).startswith("bad question"))
    if failed:
        typer.echo(f"vlrl eval prism: {failed} of {n} question(s) failed in a backend (counted as wrong and as "
                   "'errors' in results.json); rerun the same command to retry them", err=True)
    code = exit_code(n - failed, failed)
    if code:
        raise typer.Exit(code)


def register(groups: dict[str, typer.Typer]) -> None:
    """Add this method's commands to the ``vlrl`` verb groups (``groups["data"]`` is ``vlrl data``)."""
    data, reward, evals = groups["data"], groups["reward"], groups["eval"]
    data.command("qa-curate", help="CapRL QA curation: VLM writes MCQs per image, keep those that need the image (resumable).")(qa_curate_cmd)
    data.command("export", help="Write a vlrl QA dataset in a published layout (--format caprl: CapRL's public QA rows).")(export_cmd)
    reward.command("smoke", help="Reward sanity check before training. caprl_qa (default): real captions must out-score "
                   "generic, empty and shuffled ones. rubicap_rubric: rubrics must fail the student caption and pass the teachers'.")(smoke_cmd)
    evals.command("prism", help="Prism-style QA: captioner describes each image, a text-only answerer answers from the caption.")(prism_cmd)
