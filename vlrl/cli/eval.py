"""`vlrl eval ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("arena", help="Pairwise arena: a VLM judge compares candidate vs baseline captions in both orders.")
def arena_cmd(
    candidate: str = typer.Option(..., "--candidate", help="Candidate captioner spec (or NAME=SPEC, or a captions .jsonl)."),
    baseline: list[str] = typer.Option(..., "--baseline", help="Baseline captioner spec; repeat per baseline."),
    judge: str = typer.Option(..., "--judge", help="Judge backend spec (a VLM: it sees the image)."),
    images: str = typer.Option(..., "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, captions.jsonl, judgments.jsonl, cache/)."),
    reference: str | None = typer.Option(None, "--reference", help="JSONL of reference captions {image_id, caption} shown to the judge."),
    judge_prompt_file: str | None = typer.Option(None, "--judge-prompt-file", help="Judge prompt template."),
    batch_size: int = typer.Option(16, "--batch-size", help="Requests per backend call."),
    max_retries: int = typer.Option(2, "--max-retries", help="Corrective retries for unparseable verdicts."),
) -> None:
    from rich.console import Console

    from vlrl.rubicap.arena import results_table, run_arena

    try:
        results = run_arena(
            candidate, baseline, judge, images, out, reference=reference, judge_prompt_file=judge_prompt_file,
            batch_size=batch_size, max_retries=max_retries,
        )
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl eval arena: {e}", err=True)
        raise typer.Exit(2) from None
    Console().print(results_table(results))
    typer.echo(f"results -> {out}/results.json")


@app.command("caption-qa", help="Information density: QA accuracy of captions truncated to word budgets (caprl_qa scoring).")
def caption_qa_cmd(
    qa: str = typer.Option(..., "--qa", help="QA dataset with image + 'questions' columns (CapRL curation output)."),
    answerer: str = typer.Option(..., "--answerer", help="Text-only answerer backend spec."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, scores.jsonl, accuracy_vs_budget.png)."),
    captions: list[str] = typer.Option([], "--captions", help="JSONL captions file {image_id, caption}; repeatable."),
    captioner: list[str] = typer.Option([], "--captioner", help="Captioner spec (NAME=SPEC allowed), run on the QA images; repeatable."),
    budgets: str = typer.Option("50,100,200,400", "--budgets", help="Comma-separated word budgets."),
    setting: list[str] = typer.Option([], "--set", help="caprl_qa setting KEY=VALUE (e.g. mode=exact, rounds=4); repeatable."),
    batch_size: int = typer.Option(32, "--batch-size", help="Captions per reward call."),
) -> None:
    from rich.console import Console

    from vlrl.rewards.scoring import parse_setting_pairs
    from vlrl.rubicap.caption_qa import parse_budgets, results_table, run_caption_qa

    try:
        settings = parse_setting_pairs(setting)
        results = run_caption_qa(
            qa, answerer, out, captions=captions, captioners=captioner, budgets=parse_budgets(budgets),
            reward_settings=settings, batch_size=batch_size,
        )
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl eval caption-qa: {e}", err=True)
        raise typer.Exit(2) from None
    Console().print(results_table(results))
    typer.echo(f"results -> {out}/results.json, plot -> {out}/accuracy_vs_budget.png")


@app.command("prism", help="Prism-style QA: captioner describes each image, a text-only answerer answers from the caption.")
def prism_cmd(
    captioner: str = typer.Option(..., "--captioner", help="Backend spec of the captioner under test."),
    answerer: str = typer.Option(..., "--answerer", help="Backend spec of the text-only answerer."),
    bench: str = typer.Option(..., "--bench", help="Benchmark JSONL file or dataset folder (format: docs/prism.md)."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, predictions.jsonl, captions.jsonl, cache/)."),
    limit: int | None = typer.Option(None, "--limit", help="Evaluate only the first N questions."),
    caption_max_tokens: int = typer.Option(512, "--caption-max-tokens", help="Caption length limit in tokens."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not use the response cache in OUT/cache."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    from rich.console import Console
    from rich.table import Table

    from vlrl.caprl.prism import evaluate_prism

    try:
        res = evaluate_prism(captioner, answerer, bench, out, limit=limit, caption_max_tokens=caption_max_tokens,
                             cache=not no_cache, progress=not quiet)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl eval prism: {e}", err=True)
        raise typer.Exit(2) from None
    table = Table(title=f"Prism-style accuracy ({res['n']} questions, {res['images']} images)")
    for col in ("benchmark", "n", "accuracy", "by type", "errors"):
        table.add_column(col)
    for name, b in res["benchmarks"].items():
        by_type = ", ".join(f"{t} {v:.3f}" for t, v in b["by_type"].items())
        table.add_row(name, str(b["n"]), f"{b['accuracy']:.3f}", by_type, str(b["errors"]))
    table.add_row("overall", str(res["n"]), f"{res['overall']:.3f}" if res["overall"] is not None else "n/a",
                  f"macro {res['macro']:.3f}" if res["macro"] is not None else "", str(res["errors"]))
    Console().print(table)
    typer.echo(f"results -> {out}/results.json")


@app.command("reasoning", help="MathVista-style reasoning eval: accuracy (HFRRF's answer extraction), format failures, lengths.")
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
) -> None:
    import json

    from vlrl.reasoning.evaluate import evaluate_reasoning

    try:
        metrics = evaluate_reasoning(model, bench, out, max_tokens=max_tokens, temperature=temperature,
                                     batch_size=batch_size, limit=limit, group_by=group_by, prompt=prompt)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl eval reasoning: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(metrics, indent=2, default=str))
