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
        89_478_485,  # vlrl.core.images.DEFAULT_MAX_PIXELS_LIMIT, kept literal so --help stays instant
        "--max-pixels",
        "--max-image-pixels",
        min=1,
        help="Refuse images declaring more pixels than this (decompression bombs)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    from pathlib import Path

    from vlrl.core.images import check_images
    from vlrl.core.pipeline import atomic_write_json
    from vlrl.core.sources import load_any_dataset

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
