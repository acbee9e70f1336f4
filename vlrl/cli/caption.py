"""`vlrl caption`: batch-caption an image corpus (resumable, shardable)."""

from __future__ import annotations

from pathlib import Path

import typer

from vlrl.methods.options import RESIZE_MAX_PIXELS_HELP, JobFlags, MaxImagePixels, command_errors, long_job


@long_job(image_flags=False, before="cache",
          force="Start over: remove this shard's captions, quarantine and manifest first.",
          retry_quarantined="Process images quarantined by earlier runs again.")
def caption(
    images: str | None = typer.Option(None, "--images", help="Folder, .jsonl/.parquet manifest, save_to_disk dataset, or tar shards (glob / {000..009})."),
    videos: str | None = typer.Option(None, "--videos", help="Folder of video files (mp4, webm, mkv, mov, avi, gif), .jsonl/.parquet manifest or save_to_disk dataset with a videos column (paths or bytes): frames sampled by Qwen's video rules (docs/captioning.md)."),
    video_fps: float | None = typer.Option(None, "--video-fps", help="Videos: frames kept per second (qwen-vl-utils' fps; default 2)."),
    video_nframes: int | None = typer.Option(None, "--video-nframes", help="Videos: a fixed frame count instead of --video-fps (qwen-vl-utils' nframes)."),
    video_max_pixels: int | None = typer.Option(None, "--video-max-pixels", help="Videos: pixel budget per frame (qwen-vl-utils' video_max_pixels)."),
    video_total_pixels: int | None = typer.Option(None, "--video-total-pixels", help="Videos: pixel budget shared by all frames of a video (qwen-vl-utils' total_pixels)."),
    model: list[str] = typer.Option(..., "--model", help="Backend spec: hf:PATH, openai:URL@MODEL or py:module:factory (docs/captioning.md); repeat for one per Ray worker."),
    out: Path = typer.Option(..., "--out", help="Output folder (captions/, manifest.json, quarantine.jsonl)."),
    prompt: str | None = typer.Option(None, "--prompt", help="Prompt text (jinja: {{ image_id }}, {{ meta.x }})."),
    prompt_file: Path | None = typer.Option(None, "--prompt-file", help="Prompt template file."),
    shard: str | None = typer.Option(None, "--shard", help="Caption only shard i of n ('i/n')."),
    batch_size: int = typer.Option(16, "--batch-size", help="Images per backend call."),
    engine: str = typer.Option("local", "--engine", help="local | ray"),
    max_tokens: int = typer.Option(256, "--max-tokens", "--caption-max-tokens", help="Caption length limit in tokens (captions that stop at it are counted as truncated)."),
    temperature: float = typer.Option(0.0, "--temperature"),
    top_p: float = typer.Option(1.0, "--top-p"),
    seed: int | None = typer.Option(None, "--seed"),
    output_format: str = typer.Option("jsonl", "--format", help="jsonl | parquet"),
    part_size: int = typer.Option(10_000, "--part-size", help="Captions per output part."),
    source_type: str | None = typer.Option(None, "--source-type", help="folder | manifest | hf | wds (default: detected)."),
    split: str | None = typer.Option(None, "--split", help="Split of a saved DatasetDict."),
    image_column: str | None = typer.Option(None, "--image-column"),
    id_column: str | None = typer.Option(None, "--id-column"),
    max_pixels: int | None = typer.Option(None, "--max-pixels", "--resize-max-pixels", help=RESIZE_MAX_PIXELS_HELP),
    max_image_pixels: MaxImagePixels = None,
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Response cache in OUT/cache (replays the in-flight batch after a kill)."),
    limit: int | None = typer.Option(None, "--limit", help="Stop after N new captions."),
    loaders: int = typer.Option(4, "--loaders", help="Image decoding threads."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster address (default: $RAY_ADDRESS or a local cluster)."),
    num_workers: int | None = typer.Option(None, "--num-workers", help="Ray caption workers (default: one per --model)."),
    gpus_per_worker: float = typer.Option(0.0, "--gpus-per-worker"),
    cpus_per_worker: float = typer.Option(1.0, "--cpus-per-worker"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    job: JobFlags = JobFlags(),
) -> None:
    from vlrl.captioning import CaptionJob, run_caption
    from vlrl.core.jobs import exit_code

    # a dead backend exits 1; a bad path, setting or input, or a folder that cannot be written (a
    # read-only or full disk, a file in the way) is one redacted line and exit 2, as in every command
    with command_errors("caption"):
        if (images is None) == (videos is None):
            raise ValueError("give --images or --videos (one of them)")
        video = {k: v for k, v in {"fps": video_fps, "nframes": video_nframes, "max_pixels": video_max_pixels,
                                   "total_pixels": video_total_pixels}.items() if v is not None}
        if video and not videos:
            raise ValueError("--video-* settings apply to --videos only")
        if video:
            from vlrl.core.video import VideoSpec

            VideoSpec(**video).check()
        caption_job = CaptionJob(
            images=images or videos, media="video" if videos else "image", video=video, models=list(model), out=out, prompt=prompt,
            prompt_file=str(prompt_file) if prompt_file else None, shard=shard, batch_size=batch_size,
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, output_format=output_format,
            part_size=part_size, source_type=source_type, split=split, image_column=image_column,
            id_column=id_column, cache=cache, max_pixels=max_pixels, loaders=loaders, limit=limit,
            progress=progress, engine=engine, ray_address=ray_address, num_workers=num_workers,
            gpus_per_worker=gpus_per_worker, cpus_per_worker=cpus_per_worker, **({} if max_image_pixels is None else {"max_image_pixels": max_image_pixels or None}),
            force=job.force, retry_quarantined=job.retry_quarantined,
            max_consecutive_failures=job.max_consecutive_failures,
        )
        from vlrl.core.images import image_limits_of

        with image_limits_of({"max_image_pixels": max_image_pixels}):  # PIL's own ceiling follows the limit
            m = run_caption(caption_job)
    run, counts = m["this_run"], m["counts"]
    typer.echo(
        f"{m['status']}: {run['captioned']} new captions ({run['images_per_s']} img/s), "
        f"{run['quarantined']} quarantined, {run['failed']} failed; "
        f"total {counts['captioned']} captioned, {counts['quarantined']} quarantined -> {out}"
    )
    if run.get("empty") or run.get("truncated"):
        typer.echo(f"of the new captions, {run['empty']} empty (whitespace only) and {run['truncated']} truncated "
                   f"at --max-tokens {max_tokens} (manifest.json counts them)", err=True)
    if run["failed"]:
        typer.echo(f"{run['failed']} images failed in the backend; rerun the same command to retry them", err=True)
    code = exit_code(run["captioned"] + run["quarantined"], run["failed"])
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("caption", help="Caption an image corpus with any backend (resumable, shardable).")(caption)
