"""`vlrl bench ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("caption", help="Images/s of batched `vlrl caption` vs one-at-a-time generate, and peak RSS vs corpus size.")
def bench_caption_cmd(
    json_out: str = typer.Option(..., "--json", help="Write the numbers here."),
    model: str | None = typer.Option(None, "--model", help="VLM folder (default: build the tiny Qwen2.5-VL)."),
    images: int = typer.Option(64, "--images", help="Images in the small corpus (the large one has 10x)."),
    batch_size: int = typer.Option(32, "--batch-size"),
    max_tokens: int = typer.Option(32, "--max-tokens"),
    threads: int | None = typer.Option(None, "--threads", help="OMP_NUM_THREADS for both sides (default: inherit)."),
) -> None:
    import json as _json
    from pathlib import Path as _Path

    from vlrl.captioning.bench import bench_caption

    try:
        res = bench_caption(model=model, n_images=images, batch_size=batch_size, max_tokens=max_tokens, threads=threads)
    except (ValueError, RuntimeError) as e:  # bad flags, or a child run that failed (its stderr tail follows)
        typer.echo(f"vlrl bench caption: {e}", err=True)
        raise typer.Exit(2) from None
    _Path(json_out).parent.mkdir(parents=True, exist_ok=True)
    _Path(json_out).write_text(_json.dumps(res, indent=2) + "\n")
    typer.echo(f"batched (vlrl caption): {res['batched_images_per_s']:.2f} img/s")
    typer.echo(f"single (plain generate): {res['single_images_per_s']:.2f} img/s")
    grow = res["peak_rss_mb_large"] / res["peak_rss_mb_small"] - 1
    typer.echo(f"peak RSS: {res['peak_rss_mb_small']:.0f} MB small, {res['peak_rss_mb_large']:.0f} MB on 10x the images ({grow:+.1%})")
    typer.echo(f"speedup: {res['speedup']:.2f}x")
