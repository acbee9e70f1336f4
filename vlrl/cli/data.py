"""`vlrl data ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("check", help="Run the image loader over a folder or dataset and report every bad file as JSON.")
def check(
    src: str = typer.Argument(..., help="Image folder, imagefolder, JSONL/parquet file or folder, or save_to_disk folder."),
    json_out: str = typer.Option(..., "--json", help="Where to write {files, ok, errors}."),
    root: str | None = typer.Option(
        None, "--root", help="Dataset root no image path may escape (default: the source's own root)."
    ),
    max_pixels: int = typer.Option(
        89_478_485,  # vlrl.images.DEFAULT_MAX_PIXELS_LIMIT, kept literal so --help stays instant
        "--max-pixels",
        min=1,
        help="Refuse images declaring more pixels than this (decompression bombs)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    from pathlib import Path

    from vlrl.images import check_images
    from vlrl.pipeline import atomic_write_json
    from vlrl.records import load_any_dataset

    if Path(json_out).is_dir():  # found out before checking, not when writing the report
        typer.echo(f"vlrl data check: --json {json_out} is a folder; give a file path", err=True)
        raise typer.Exit(2)
    try:
        source = load_any_dataset(src, root=root)
        items = source.iter_images()
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data check: {e}", err=True)
        raise typer.Exit(2) from None
    report = check_images(items, root=source.root, max_pixels_limit=max_pixels, total=len(source), progress=not quiet)
    if source.skipped:  # files the source could not even list (e.g. names that are not UTF-8)
        report["files"] += [{"path": s["path"], "status": "error", "reason": s["reason"]} for s in source.skipped]
        report["errors"] += len(source.skipped)
    try:
        atomic_write_json(json_out, report)
    except OSError as e:
        typer.echo(f"vlrl data check: cannot write {json_out}: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"checked {len(report['files'])} images from {src} ({source.kind}, root {Path(source.root)}): "
        f"{report['ok']} ok, {report['errors']} errors -> {json_out}"
    )


@app.command("teacher-captions", help="RubiCap teacher committee: every teacher captions every image (resumable, cached).")
def teacher_captions_cmd(
    images: str = typer.Option(..., "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    teacher: list[str] = typer.Option(..., "--teacher", help="Teacher backend spec, optionally NAME=SPEC; repeat per teacher."),
    out: str = typer.Option(..., "--out", help="Output folder (teacher_captions.jsonl, failures.jsonl, stats.json, cache/)."),
    prompt_file: str | None = typer.Option(None, "--prompt-file", help="Jinja prompt template (default: teacher_caption.jinja)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per backend call."),
    max_tokens: int = typer.Option(512, "--max-tokens", help="Caption length limit in tokens."),
    min_words: int = typer.Option(3, "--min-words", help="Shorter answers count as missing captions."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
) -> None:
    import json

    from vlrl.rubicap.teachers import run_teacher_committee

    try:
        stats = run_teacher_committee(
            images, teacher, out, prompt_file=prompt_file, batch_size=batch_size, max_tokens=max_tokens,
            min_words=min_words, shard=shard,
        )
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data teacher-captions: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(stats, indent=2))


@app.command("rubrics", help="RubiCap rubric synthesis: consensus facts, student deficiencies, weighted rubrics.")
def rubrics_cmd(
    teachers: str = typer.Option(..., "--teachers", help="Folder written by `vlrl data teacher-captions`."),
    student: str = typer.Option(..., "--student", help="Backend spec of the student captioner, or a JSONL file of its captions {image_id, caption}."),
    writer: str = typer.Option(..., "--writer", help="Backend spec of the rubric writer."),
    out: str = typer.Option(..., "--out", help="Output folder (rubrics.jsonl, rejected.jsonl, stats.json, cache/)."),
    with_image: bool = typer.Option(False, "--with-image", help="Show the image to the writer too."),
    student_prompt_file: str | None = typer.Option(None, "--student-prompt-file", help="Student caption prompt template."),
    writer_prompt_file: str | None = typer.Option(None, "--writer-prompt-file", help="Rubric writer prompt template."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per backend call."),
    max_retries: int = typer.Option(2, "--max-retries", help="Corrective retries for invalid writer output."),
    student_max_tokens: int = typer.Option(512, "--student-max-tokens", help="Student caption length limit in tokens."),
    writer_max_tokens: int = typer.Option(2048, "--writer-max-tokens", help="Rubric writer answer length limit in tokens."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
) -> None:
    import json

    from vlrl.rubicap.synthesis import build_rubrics

    try:
        stats = build_rubrics(
            teachers, student, writer, out, with_image=with_image, student_prompt_file=student_prompt_file,
            writer_prompt_file=writer_prompt_file, batch_size=batch_size, max_retries=max_retries, shard=shard,
            student_max_tokens=student_max_tokens, writer_max_tokens=writer_max_tokens,
        )
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data rubrics: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(stats, indent=2))


@app.command("qa-curate", help="CapRL QA curation: VLM writes MCQs per image, keep those that need the image (resumable).")
def qa_curate_cmd(
    images: str = typer.Option(..., "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    vlm: str = typer.Option(..., "--vlm", help="Backend spec of the VLM that writes and (with the image) answers questions."),
    answerer: str = typer.Option(..., "--answerer", help="Backend spec of the text-only answerer (no image)."),
    out: str = typer.Option(..., "--out", help="Output folder (dataset/, stats.json, records/, cache/)."),
    per_image: int = typer.Option(5, "--per-image", help="Questions to generate per image."),
    rounds: int = typer.Option(4, "--rounds", help="Shuffled answering rounds per question and filter half."),
    visual_min: float = typer.Option(0.75, "--visual-min", help="Keep if accuracy with the image is above this."),
    text_max: float = typer.Option(0.25, "--text-max", help="Keep if text-only accuracy is below this."),
    batch_size: int = typer.Option(8, "--batch-size", help="Images per backend call."),
    temperature: float = typer.Option(0.1, "--temperature", help="VLM sampling temperature for question writing."),
    max_tokens: int = typer.Option(1024, "--max-tokens", help="Token limit of the question-writing answer."),
    seed: int = typer.Option(0, "--seed", help="Seed of generation sampling and option shuffles."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    import json

    from vlrl.caprl.curate import CurateConfig, curate
    from vlrl.pipeline import parse_shard

    cfg = CurateConfig(per_image=per_image, rounds=rounds, visual_min=visual_min, text_max=text_max,
                       batch_size=batch_size, temperature=temperature, max_tokens=max_tokens, seed=seed)
    try:
        stats = curate(images, vlm, answerer, out, cfg, shard=parse_shard(shard), progress=not quiet)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data qa-curate: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps({k: v for k, v in stats.items() if k != "settings"}, indent=2))


@app.command("cold-start", help="Vision-R1 cold start: VLM pseudo-CoT → description → text reasoner; keep verified <think>/<answer> samples.")
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
) -> None:
    import json

    from vlrl.reasoning.cold_start import cold_start

    try:
        stats = cold_start(input, vlm, reasoner, out, batch_size=batch_size, max_samples=max_samples,
                           vlm_max_tokens=vlm_max_tokens, reasoner_max_tokens=reasoner_max_tokens,
                           temperature=temperature, shard=shard)
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data cold-start: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(stats, indent=2))
