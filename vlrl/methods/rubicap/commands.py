"""RubiCap's commands, registered into the ``vlrl`` verb groups (data, eval).

Commands only parse flags, call this method's library code and print results; heavy imports happen
inside each command so ``vlrl --help`` stays fast. Each command is a plain function; :func:`register`
adds them to the groups.
"""

from __future__ import annotations

import typer

from vlrl.methods.options import JobFlags, command_errors, job_command, long_job


@long_job
def teacher_captions_cmd(
    images: str = typer.Option(..., "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    teacher: list[str] = typer.Option(..., "--teacher", help="Teacher backend spec, optionally NAME=SPEC, or NAME=FILE.jsonl of captions made elsewhere; repeat per teacher."),
    out: str = typer.Option(..., "--out", help="Output folder (teacher_captions.jsonl, failures.jsonl, stats.json, cache/)."),
    prompt_file: str | None = typer.Option(None, "--prompt-file", help="Jinja prompt template (default: teacher_caption.jinja)."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per backend call."),
    max_tokens: int = typer.Option(512, "--max-tokens", "--caption-max-tokens", help="Caption length limit in tokens (captions that stop at it are counted as truncated)."),
    temperature: float = typer.Option(0.0, "--temperature", help="Teacher sampling temperature (0 = greedy)."),
    min_words: int = typer.Option(3, "--min-words", help="Shorter answers count as missing captions."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    import json

    from vlrl.methods.rubicap.teachers import run_teacher_committee

    stats = job_command(
        "data teacher-captions", out, params, lambda: run_teacher_committee(
            images, teacher, out, prompt_file=prompt_file, batch_size=batch_size, max_tokens=max_tokens,
            temperature=temperature, min_words=min_words, shard=shard,
        ), specs=teacher, ignore=("shard",), quarantine=["failures.jsonl"], tolerate_dead=True,
        outputs=["captions.jsonl", "failures.jsonl", "teacher_captions.jsonl", "stats.json", "meta.json"],
    )
    typer.echo(json.dumps(stats, indent=2))
    per = list(stats.get("per_teacher", {}).values())
    captioned = sum(t["captioned"] for t in per)
    if stats.get("images") and not captioned:
        from vlrl.core.jobs import EXIT_FAILED

        typer.echo("vlrl data teacher-captions: no teacher captioned any image (failures.jsonl says why)", err=True)
        raise typer.Exit(EXIT_FAILED)
    # a caption missing because a backend failed is a failure (retried by the next run); one missing
    # for its input (a bad image) or its content (a refusal, too short) is not the backend's
    failed = sum(n for t in per for kind, n in t["reasons"].items() if backend_failure_kind(kind))
    _exit_for_failures("data teacher-captions", captioned, failed,
                       "teacher caption(s) missing for a backend failure (failures.jsonl); rerun the same command "
                       "to retry them")


def backend_failure_kind(kind: str) -> bool:
    """Whether a missing caption's reason kind (``backend error``, ``bad image``...) is the backend's."""
    return kind.startswith(("backend", "pre-flight", "not attempted"))


def _exit_for_failures(name: str, succeeded: int, failed: int, what: str) -> None:
    """End as the README's exit-code table says: 0 all done, 3 some failed, 1 nothing succeeded."""
    from vlrl.core.jobs import exit_code

    if failed:
        typer.echo(f"vlrl {name}: {failed} {what}", err=True)
    code = exit_code(succeeded, failed)
    if code:
        raise typer.Exit(code)


@long_job
def rubrics_cmd(
    teachers: str = typer.Option(..., "--teachers", help="Folder written by `vlrl data teacher-captions`."),
    student: str = typer.Option(..., "--student", help="Backend spec of the student captioner, or a JSONL file of its captions {image_id, caption}."),
    writer: str = typer.Option(..., "--writer", help="Backend spec of the rubric writer."),
    out: str = typer.Option(..., "--out", help="Output folder (rubrics.jsonl, rejected.jsonl, stats.json, cache/)."),
    with_image: bool | None = typer.Option(None, "--with-image/--text-only", help="Show the image to the writer (default: when its backend is a local VLM)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the per-image random teacher label order."),
    student_prompt_file: str | None = typer.Option(None, "--student-prompt-file", help="Student caption prompt template."),
    writer_prompt_file: str | None = typer.Option(None, "--writer-prompt-file", help="Rubric writer prompt template."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per backend call."),
    max_retries: int = typer.Option(2, "--max-retries", help="Corrective retries for invalid writer output."),
    student_max_tokens: int = typer.Option(512, "--student-max-tokens", "--caption-max-tokens", help="Student caption length limit in tokens."),
    writer_max_tokens: int = typer.Option(2048, "--writer-max-tokens", help="Rubric writer answer length limit in tokens."),
    shard: str | None = typer.Option(None, "--shard", help="Process shard i/n of the images."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    import json

    from vlrl.methods.rubicap.synthesis import build_rubrics

    stats = job_command(
        "data rubrics", out, params, lambda: build_rubrics(
            teachers, student, writer, out, with_image=with_image, student_prompt_file=student_prompt_file,
            writer_prompt_file=writer_prompt_file, batch_size=batch_size, max_retries=max_retries, shard=shard,
            student_max_tokens=student_max_tokens, writer_max_tokens=writer_max_tokens, seed=seed,
        ), specs=[student, writer], ignore=("shard", "max_retries"), quarantine=["rejected.jsonl"],
        outputs=["rubrics.jsonl", "rejected.jsonl", "student.jsonl", "stats.json"],
    )
    typer.echo(json.dumps(stats, indent=2))
    # a rejection for a backend error is a failure; one for the writer's content is a quarantine,
    # but a run where every image was rejected produced nothing to train on
    backend = sum(n for reason, n in stats.get("rejected_by_reason", {}).items() if "backend error" in reason)
    good = stats.get("accepted", 0) + stats.get("solved", 0)
    if stats.get("images") and not good:
        from vlrl.core.jobs import EXIT_FAILED

        typer.echo(f"vlrl data rubrics: every image was rejected ({stats.get('rejected', 0)}; rejected.jsonl says why)",
                   err=True)
        raise typer.Exit(EXIT_FAILED)
    _exit_for_failures("data rubrics", good, backend, "image(s) rejected for a backend error (rejected.jsonl); "
                       "rerun with --retry-quarantined once the backend is healthy")


@long_job
def arena_cmd(
    candidate: str = typer.Option(..., "--candidate", help="Candidate captioner spec (or NAME=SPEC, or FILE.jsonl / NAME=FILE.jsonl of captions)."),
    baseline: list[str] = typer.Option(..., "--baseline", help="Baseline captioner spec; repeat per baseline."),
    judge: str = typer.Option(..., "--judge", help="Judge backend spec (a VLM: it sees the image)."),
    images: str = typer.Option(..., "--images", help="Image folder, imagefolder, JSONL/parquet manifest or save_to_disk folder."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, captions.jsonl, judgments.jsonl, cache/)."),
    reference: str | None = typer.Option(None, "--reference", help="JSONL of reference captions {image_id, caption} shown to the judge."),
    judge_prompt_file: str | None = typer.Option(None, "--judge-prompt-file", help="Judge prompt template."),
    batch_size: int = typer.Option(16, "--batch-size", help="Requests per backend call."),
    max_retries: int = typer.Option(2, "--max-retries", help="Corrective retries for unparseable verdicts."),
    caption_max_tokens: int = typer.Option(512, "--caption-max-tokens", min=1, help="Caption length limit in tokens (captions that stop at it are counted as truncated)."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    from rich.console import Console

    from vlrl.methods.rubicap.arena import results_table, run_arena

    results = job_command(
        "eval arena", out, params, lambda: run_arena(
            candidate, baseline, judge, images, out, reference=reference, judge_prompt_file=judge_prompt_file,
            batch_size=batch_size, max_retries=max_retries, caption_max_tokens=caption_max_tokens,
        ), specs=[candidate, *baseline, judge], ignore=("max_retries",),
        outputs=["results.json", "captions.jsonl", "judgments.jsonl"],
    )
    Console().print(results_table(results))
    typer.echo(f"results -> {out}/results.json")
    per = list(results.get("baselines", {}).values())
    bad_inputs = sum(b.get("bad_inputs", 0) for b in per)
    if bad_inputs:
        typer.echo(f"vlrl eval arena: {bad_inputs} pair(s) left out because an image could not be read (counted as "
                   "'bad_inputs' in results.json; caption_failures.jsonl says why)", err=True)
    if bad_inputs and not any(b["pairs"] for b in per):
        from vlrl.core.jobs import EXIT_FAILED

        raise typer.Exit(EXIT_FAILED)
    _exit_for_failures("eval arena", sum(b["pairs"] for b in per),
                       sum(b.get("missing_captions", 0) - b.get("bad_inputs", 0) + b.get("judge_failures", 0) for b in per),
                       "pair(s) not judged: a caption is missing or the judge failed (results.json counts "
                       "'missing_captions' and 'judge_failures'); rerun the same command to retry them")


@long_job
def caption_qa_cmd(
    qa: str = typer.Option(..., "--qa", help="QA dataset with image + 'questions' columns (CapRL curation output)."),
    answerer: str = typer.Option(..., "--answerer", help="Text-only answerer backend spec."),
    out: str = typer.Option(..., "--out", help="Output folder (results.json, scores.jsonl, accuracy_vs_budget.png)."),
    captions: list[str] = typer.Option([], "--captions", help="JSONL captions file {image_id, caption}; repeatable."),
    captioner: list[str] = typer.Option([], "--captioner", help="Captioner spec (NAME=SPEC allowed), run on the QA images; repeatable."),
    budgets: str = typer.Option("50,100,200,400", "--budgets", help="Comma-separated word budgets."),
    setting: list[str] = typer.Option([], "--set", help="caprl_qa setting KEY=VALUE (e.g. mode=exact, rounds=4); repeatable."),
    batch_size: int = typer.Option(32, "--batch-size", help="Captions per reward call."),
    caption_max_tokens: int = typer.Option(1024, "--caption-max-tokens", min=1, help="--captioner: Caption length limit in tokens (captions that stop at it are counted as truncated)."),
    job: JobFlags = JobFlags(),
) -> None:
    params = job.params(locals())
    from rich.console import Console

    from vlrl.methods.rubicap.caption_qa import parse_budgets, results_table, run_caption_qa
    from vlrl.rewards.scoring import parse_setting_pairs

    with command_errors("eval caption-qa"):
        settings = parse_setting_pairs(setting)
    results = job_command(
        "eval caption-qa", out, params, lambda: run_caption_qa(
            qa, answerer, out, captions=captions, captioners=captioner, budgets=parse_budgets(budgets),
            reward_settings=settings, batch_size=batch_size, caption_max_tokens=caption_max_tokens,
        ), specs=[answerer, *captioner], outputs=["results.json", "scores.jsonl", "captions.jsonl"],
    )
    Console().print(results_table(results))
    typer.echo(f"results -> {out}/results.json, plot -> {out}/accuracy_vs_budget.png")
    per = [r for r in results["captioners"].values()]
    levels = [str(b) for b in results["budgets"]] + ["full"]
    # a caption missing because its image cannot be read is that record's input problem (counted as
    # 'bad_inputs'), not a failure a rerun can fix; it still leaves nothing scored when every image is bad
    failed = sum(r[c].get("failed", 0) for r in per for c in levels) + sum(
        (r["missing_captions"] - r.get("bad_inputs", 0)) * len(levels) for r in per)
    scored = sum(r[c]["scored"] for r in per for c in levels)
    bad_inputs = sum(r.get("bad_inputs", 0) for r in per)
    if bad_inputs:
        typer.echo(f"vlrl eval caption-qa: {bad_inputs} image(s) could not be read and are left out (counted as "
                   "'bad_inputs' in results.json; caption_failures.jsonl says why)", err=True)
    if bad_inputs and not scored and not failed:
        from vlrl.core.jobs import EXIT_FAILED

        raise typer.Exit(EXIT_FAILED)
    _exit_for_failures("eval caption-qa", scored, failed,
                       "caption × budget unit(s) unscored because the answerer or captioner failed (counted as "
                       "'unscored' and 'missing_captions' in results.json); rerun the same command to retry them")


def register(groups: dict[str, typer.Typer]) -> None:
    """Add this method's commands to the ``vlrl`` verb groups (``groups["data"]`` is ``vlrl data``), and
    its smoke check to ``vlrl reward smoke`` (``--reward rubicap_rubric``)."""
    from vlrl.rewards.smoke import register_smoke

    register_smoke("rubicap_rubric", _rubric_smoke)
    data, evals = groups["data"], groups["eval"]
    data.command("teacher-captions", help="RubiCap teacher committee: every teacher captions every image (resumable, cached).")(teacher_captions_cmd)
    data.command("rubrics", help="RubiCap rubric synthesis: consensus facts, student deficiencies, weighted rubrics.")(rubrics_cmd)
    evals.command("arena", help="Pairwise arena: a VLM judge compares candidate vs baseline captions in both orders.")(arena_cmd)
    evals.command("caption-qa", help="Information density: QA accuracy of captions truncated to word budgets (caprl_qa scoring).")(caption_qa_cmd)


def _rubric_smoke(rubrics=None, judge=None, setting=(), limit=None, out="smoke.json", drop=False, cache=None, **_):
    """``vlrl reward smoke --reward rubicap_rubric``: the discrimination check after synthesis."""
    from vlrl.methods.rubicap.discrimination import rubric_discrimination
    from vlrl.rewards.scoring import parse_setting_pairs

    if not rubrics or not judge:
        raise ValueError("rubicap_rubric needs --rubrics RUBRICS.jsonl and --judge SPEC")
    settings = parse_setting_pairs(list(setting))
    if cache:
        settings.setdefault("cache", cache)
    return rubric_discrimination(rubrics, judge, out=out, limit=limit or None, drop=drop, settings=settings)
