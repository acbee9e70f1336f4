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
        min=0,
        help="Refuse images declaring more pixels than this (decompression bombs; 0: no limit, as on every command)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    from pathlib import Path

    from vlrl.core.images import check_images
    from vlrl.core.pipeline import atomic_write_json
    from vlrl.core.sources import load_any_dataset, plain_image_folder

    if Path(json_out).is_dir():  # found out before checking, not when writing the report
        typer.echo(f"vlrl data check: --json {json_out} is a folder; give a file path", err=True)
        raise typer.Exit(2)
    try:
        # a folder of image files is listed without datasets/pandas (seconds of imports for an os.walk)
        if (listed := plain_image_folder(src)) is not None:
            names, skipped = listed
            folder = Path(src)
            source_root, kind, total = Path(root) if root else folder, "folder", len(names)
            items = ((n, str(folder / n) if root else n) for n in names)
        else:
            source = load_any_dataset(src, root=root)
            source_root, kind, total, skipped = source.root, source.kind, len(source), source.skipped
            items = source.iter_images()
    except (OSError, ValueError) as e:
        typer.echo(f"vlrl data check: {e}", err=True)
        raise typer.Exit(2) from None
    report = check_images(items, root=source_root, max_pixels_limit=max_pixels or None, total=total, progress=not quiet)
    if skipped:  # files the source could not even list (e.g. names that are not UTF-8)
        report["files"] += [{"path": s["path"], "status": "error", "reason": s["reason"]} for s in skipped]
        report["errors"] += len(skipped)
    try:
        atomic_write_json(json_out, report)
    except OSError as e:
        typer.echo(f"vlrl data check: cannot write {json_out}: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"checked {len(report['files'])} images from {src} ({kind}, root {Path(source_root)}): "
        f"{report['ok']} ok, {report['errors']} errors -> {json_out}"
    )
