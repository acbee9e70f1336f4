"""`vlrl serve ...` commands: a reward as a network service (vlrl.serve)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("reward")
def reward_cmd(
    reward: str | None = typer.Option(None, "--reward", "-r", help="Registered reward name or module:function (with --recipe: which of its rewards)."),
    setting: list[str] = typer.Option([], "--set", "-s", help="Reward setting key=value (JSON/YAML value; a.b=v nests). Repeatable."),
    recipe: str | None = typer.Option(None, "--recipe", help="Serve a recipe's reward block (settings and guards)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything but loopback needs --token-env."),
    port: int = typer.Option(8765, "--port", help="Port to bind."),
    engine: str = typer.Option("local", "--engine", help="local (uvicorn, one process) or ray (Ray Serve deployment)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Ray Serve replicas (--engine ray)."),
    max_batch_rows: int = typer.Option(256, "--max-batch-rows", min=1, help="At most this many rows per reward call."),
    max_wait_ms: float = typer.Option(20.0, "--max-wait-ms", min=0.0, help="How long a request waits for others to fill a batch."),
    max_rows: int = typer.Option(4096, "--max-rows", min=1, help="Rows per request (more: 413)."),
    max_body_mb: float = typer.Option(64.0, "--max-body-mb", min=0.001, help="Request body size in MiB (more: 413)."),
    label_column: str | None = typer.Option(None, "--label-column", help="Column OpenRLHF's labels fill (default: the reward's first required column, else answer)."),
    token_env: str | None = typer.Option(None, "--token-env", help="Environment variable holding the bearer token clients must send."),
) -> None:
    """Serve one reward over HTTP: /v1/score, OpenRLHF and CapRL++ endpoints, /health, /ready, /metrics.

    Exit codes: 0 stopped cleanly; 2 bad settings or binding."""
    from vlrl.core.redact import redact
    from vlrl.rewards.scoring import load_settings
    from vlrl.serve.config import check_binding, reward_block
    from vlrl.serve.service import ServeSettings

    if engine not in ("local", "ray"):
        typer.echo(f"error: --engine must be local or ray, not {engine!r}", err=True)
        raise typer.Exit(2)
    if engine == "local" and replicas != 1:
        typer.echo(f"error: --replicas {replicas} needs --engine ray (the local engine is one process)", err=True)
        raise typer.Exit(2)
    try:
        check_binding(host, token_env)
        name, conf = reward_block(reward, load_settings(setting), recipe)
        settings = ServeSettings(name, conf, max_batch_rows=max_batch_rows, max_wait_ms=max_wait_ms, max_rows=max_rows,
                                 max_body_bytes=int(max_body_mb * 2**20), label_column=label_column, token_env=token_env)
        from vlrl.serve.app import build_app
        from vlrl.serve.service import RewardService

        build_app(settings)  # a bad token variable fails here, before binding
        service = RewardService(settings)  # a bad reward or setting fails here, before binding
    except (ValueError, TypeError, OSError) as e:
        typer.echo(f"error: {redact(e)}", err=True)
        raise typer.Exit(2) from None
    from vlrl.serve.engines import run_local, run_ray

    if engine == "local":
        run_local(settings, host, port, service)
    else:
        service.close()  # each replica builds its own
        run_ray(settings, host, port, replicas)
