"""`vlrl reward ...` commands."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)


@app.command("score")
def score_cmd(
    reward: str = typer.Option(..., "--reward", "-r", help="Registered reward name (e.g. hfrrf, guards, caprl_qa) or module:function."),
    input: str = typer.Option(..., "--input", "-i", help='JSONL rows {"id", "completion", ...reward columns}; `vlrl caption` output ({"image_id", "caption"}) is read as is.'),
    out: str = typer.Option(..., "--out", "-o", help='Output JSONL: {"id", "reward", "details"} per row, plus the input\'s id and text columns and image reference.'),
    setting: list[str] = typer.Option([], "--set", "-s", help="Reward setting key=value (JSON/YAML value; a.b=v nests). Repeatable."),
    settings: str | None = typer.Option(None, "--settings", help="Reward settings as a JSON object."),
    settings_file: str | None = typer.Option(None, "--settings-file", help="Reward settings as a YAML/JSON file."),
    answerer: str | None = typer.Option(None, "--answerer", help="Shortcut for -s answerer=SPEC (backend spec)."),
    judge: str | None = typer.Option(None, "--judge", help="Shortcut for -s judge=SPEC (backend spec)."),
    cache: str | None = typer.Option(None, "--cache", help="Shortcut for -s cache=DIR (response cache)."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", min=1, help="Rows per reward call."),
    id_column: str | None = typer.Option(None, "--id-column", help="Column holding the row id (default: id, else image_id)."),
    text_column: str | None = typer.Option(None, "--text-column", help="Column holding the text to score (default: completion, else caption)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 3 when some rows failed (default: only a run where every row failed exits non-zero)."),
    qa: str | None = typer.Option(None, "--qa", help="A `vlrl data qa-curate` output (its folder or dataset/): each row gets the curated questions of its id as its 'questions' column (caprl_qa)."),
) -> None:
    """Score JSONL rows with any registered reward; bad rows get reward null and details.error.

    Exit codes: 0 done; 1 every row failed; 2 bad settings or input file; 3 (with --strict) some rows failed."""
    import json

    from vlrl.rewards import build_reward
    from vlrl.rewards.scoring import load_settings, score_rows_file

    try:
        conf = load_settings(setting, settings, settings_file)
        for key, value in (("answerer", answerer), ("judge", judge), ("cache", cache)):
            if value is not None:
                conf[key] = value
        from vlrl.core.jobs import preflight_all

        preflight_all(conf.get(k) for k in ("answerer", "judge"))  # a dead server fails here, in seconds
        scorer = build_reward(reward, **conf)
    except (ValueError, TypeError, OSError) as e:
        from vlrl.core.redact import redact

        typer.echo(f"error: cannot build reward {reward!r}: {redact(e)}", err=True)
        raise typer.Exit(2) from None
    try:
        join = None
        if qa is not None:
            from vlrl.methods.caprl.qa_dataset import questions_by_id

            join = {k: {"questions": v} for k, v in questions_by_id(qa).items()}
        summary = score_rows_file(scorer, input, out, batch_size=batch_size, id_column=id_column, text_column=text_column,
                                  join=join, join_name=f"--qa {qa}")
    except (OSError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    finally:
        scorer.close()  # logs each backend's accounting
    typer.echo(json.dumps(summary, indent=2, default=str))
    # a row whose reward is None scored nothing; one whose backend failed is a failure (--strict: 3)
    _exit_for(summary["scored"] - summary["none"], summary["errors"] + summary["backend_failed"], strict,
              f"{input}: no row could be scored (see the errors above)",
              none=summary["none"] if summary["scored"] == summary["none"] else 0)


def _exit_for(ok: int, failed: int, strict: bool, all_failed: str, none: int = 0) -> None:
    """Exit 1 when no row got a value (every row bad, failed in the backend, or None), 3 with
    ``--strict`` when some did not, else 0."""
    from vlrl.core.jobs import EXIT_FAILED, EXIT_PARTIAL

    if (failed or none) and not ok:
        typer.echo(f"error: {all_failed}", err=True)
        raise typer.Exit(EXIT_FAILED)
    if failed and strict:
        raise typer.Exit(EXIT_PARTIAL)


def _guard_set(setting: list[str], settings: str | None, settings_file: str | None):
    """The guards the settings ask for; exit 2 on bad settings."""
    from vlrl.rewards.guards import GuardSet
    from vlrl.rewards.scoring import load_settings

    try:
        return GuardSet.from_settings(**load_settings(setting, settings, settings_file))
    except (ValueError, TypeError, OSError) as e:
        typer.echo(f"error: bad guard settings: {e}", err=True)
        raise typer.Exit(2) from None


def _say_skipped(errors: list[str], shown: int = 20) -> None:
    """The first ``shown`` reasons a row was skipped, and how many more there were."""
    for reason in errors[:shown]:
        typer.echo(f"skipped {reason}", err=True)
    if len(errors) > shown:
        typer.echo(f"... and {len(errors) - shown} more", err=True)


@app.command("guard")
def guard_cmd(
    input: str = typer.Option(..., "--input", "-i", help='JSONL rows {"id", "caption"}; `vlrl caption` output ({"image_id", "caption"}) is read as is.'),
    json_out: str = typer.Option(..., "--json", help='Output JSON {"results": [{"id", "fired", "penalty", ...input id/text/image}], "summary"}.'),
    setting: list[str] = typer.Option([], "--set", "-s", help="Guard setting key=value, e.g. length.min_words=20. Repeatable."),
    settings: str | None = typer.Option(None, "--settings", help="Guard settings as a JSON object."),
    settings_file: str | None = typer.Option(None, "--settings-file", help="Guard settings as a YAML/JSON file."),
    id_column: str | None = typer.Option(None, "--id-column", help="Column holding the row id (default: id, else image_id)."),
    text_column: str | None = typer.Option(None, "--text-column", help="Column holding the caption (default: caption, else completion)."),
    strict: bool = typer.Option(False, "--strict", help="Exit 3 when some rows were bad (default: only a run where every row was bad exits non-zero)."),
) -> None:
    """Run every reward-hacking guard over captions and report which fired.

    Exit codes: 0 done; 1 every row was bad; 2 bad settings or input file; 3 (with --strict) some rows were bad."""
    from vlrl.core.pipeline import atomic_write_json
    from vlrl.rewards.scoring import guard_rows_file

    guards = _guard_set(setting, settings, settings_file)
    try:
        report = guard_rows_file(guards, input, id_column=id_column, text_column=text_column)
    except OSError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    atomic_write_json(json_out, report)
    s = report["summary"]
    rates = ", ".join(f"{k} {v:.1%}" for k, v in s["firing_rate"].items())
    typer.echo(f"{s['rows']} captions, {len(s['errors'])} bad rows; any guard fired on {s['any_rate']:.1%} ({rates}); "
               f"a list hit the learned guard did not confirm was set aside on {s['doubted_rate']:.1%}")
    _exit_for(s["rows"], len(s["errors"]), strict, f"{input}: every row was bad (see the errors above); nothing was checked")


@app.command("guard-eval")
def guard_eval_cmd(
    input: list[str] = typer.Option(..., "--input", "-i", help="Labelled JSONL, repeatable, one file per corpus or author: a caption (caption, else text), a label (hack/honest, or a boolean hack or is_hack) and, optionally, a category."),
    json_out: str = typer.Option(..., "--json", help='Output JSON {"corpora": {name: {"hacks", "honest", "categories", "families_on_honest", "doubted", "goal_met", "learned_thresholds"}}, "pooled", "goal", "errors"}; "hacks", "honest" and each category ("hack/<category>", "honest/<category>") are {"n", "flagged", "rate", "ci95"}; "learned_thresholds" is {"threshold", "at": {threshold: {"hacks", "honest"}}}, each {"n", "flagged", "rate", "ci95"}: what the layer flags with the learned guard\'s threshold set to each of 0.5 to 0.95 and its own (null without the learned guard).'),
    plot: str | None = typer.Option(None, "--plot", help="Also draw each corpus against the goal, and every category's rate, to this PNG (needs matplotlib)."),
    setting: list[str] = typer.Option([], "--set", "-s", help="Guard setting key=value, e.g. learned=false. Repeatable."),
    settings: str | None = typer.Option(None, "--settings", help="Guard settings as a JSON object."),
    settings_file: str | None = typer.Option(None, "--settings-file", help="Guard settings as a YAML/JSON file."),
    text_column: str | None = typer.Option(None, "--text-column", help="Column holding the caption (default: caption, else text)."),
    label_column: str | None = typer.Option(None, "--label-column", help="Column holding the label (default: label, else hack or is_hack)."),
    category_column: str = typer.Option("category", "--category-column", help="Column holding the kind of hack or of honest caption."),
    goal_recall: float = typer.Option(0.9, "--goal-recall", min=0.0, max=1.0, help="Recall a corpus must reach for goal_met."),
    goal_fpr: float = typer.Option(0.05, "--goal-fpr", min=0.0, max=1.0, help="False-positive rate a corpus must not exceed for goal_met."),
) -> None:
    """Measure the guards on labelled captions: recall and false positives with 95% Wilson intervals,
    per corpus, pooled and per category.

    Exit codes: 0 done (whether or not the goal was met); 1 no labelled row could be measured; 2 bad
    settings, input file or plot (matplotlib missing, a path that cannot be written)."""
    from vlrl.core.pipeline import atomic_write_json
    from vlrl.rewards.scoring import guard_eval_files

    if plot:  # before the guards run: a missing plotting library should not cost a whole measurement
        try:
            import matplotlib

            matplotlib.use("Agg")
            from vlrl.evaluation.reports import plot_guard_eval
        except ImportError as e:
            typer.echo(f"error: --plot needs matplotlib and pandas ({e}): pip install 'vlrl[notebooks]'", err=True)
            raise typer.Exit(2) from None
    guards = _guard_set(setting, settings, settings_file)
    try:
        result = guard_eval_files(guards, list(input), text_column=text_column, label_column=label_column,
                                  category_column=category_column, goal_recall=goal_recall, goal_fpr=goal_fpr)
    except OSError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    _say_skipped(result["errors"])
    if result["pooled"] is None:
        typer.echo("error: no labelled row could be measured (see the reasons above)", err=True)
        raise typer.Exit(1)
    atomic_write_json(json_out, result)

    def line(name: str, c: dict) -> str:
        h, n = c["hacks"], c["honest"]
        recall = f"recall {h['rate']:.3f} [{h['ci95'][0]:.3f}-{h['ci95'][1]:.3f}] ({h['flagged']}/{h['n']})" if h["n"] else "no hacks"
        fpr = f"false positives {n['rate']:.1%} [{n['ci95'][0]:.1%}-{n['ci95'][1]:.1%}] ({n['flagged']}/{n['n']})" if n["n"] else "no honest captions"
        goal = {True: "met", False: "missed", None: "not measurable"}[c["goal_met"]]
        return f"{name}: {recall}, {fpr}; goal {goal}"

    for name, c in result["corpora"].items():
        typer.echo(line(name, c))
    met = sum(c["goal_met"] is True for c in result["corpora"].values())
    measurable = sum(c["goal_met"] is not None for c in result["corpora"].values())
    typer.echo(line("pooled", result["pooled"]) + f"; goal met on {met} of {measurable} corpora with both kinds of caption")
    if (at := result["pooled"]["learned_thresholds"]) is not None:  # what the learned guard's threshold trades
        typer.echo(f"pooled, by the learned guard's threshold (its own: {at['threshold']:g}): " + "; ".join(
            f"{t} recall {v['hacks']['flagged']}/{v['hacks']['n']}, false positives {v['honest']['flagged']}/{v['honest']['n']}"
            for t, v in at["at"].items()))
    if plot:
        try:
            Path(plot).parent.mkdir(parents=True, exist_ok=True)
            plot_guard_eval(result).savefig(plot, dpi=120)
        except (OSError, ValueError) as e:  # (ValueError: a format matplotlib cannot write, "out.xyz")
            typer.echo(f"error: cannot write the plot {plot}: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"plot -> {plot}")


@app.command("guard-train")
def guard_train_cmd(
    input: list[str] = typer.Option(..., "--input", "-i", help="Labelled JSONL, repeatable: a caption (caption, else text) and a label (hack/honest, or a boolean hack or is_hack)."),
    out: str = typer.Option(..., "--out", "-o", help="Model file to write (.npz); use it with --set learned.model=FILE."),
    json_out: str | None = typer.Option(None, "--json", help='Also write {"rows", "hacks", "honest", "errors", "digest", "threshold", "fit": {"recall", "fpr"}}.'),
    text_column: str | None = typer.Option(None, "--text-column", help="Column holding the caption (default: caption, else text)."),
    label_column: str | None = typer.Option(None, "--label-column", help="Column holding the label (default: label, else hack or is_hack)."),
    c: float = typer.Option(16.0, "--c", min=1e-6, help="Inverse regularisation strength of the logistic regression."),
    threshold: float = typer.Option(0.75, "--threshold", min=0.01, max=0.99, help="Probability at which the guard fires (stored in the model)."),
) -> None:
    """Train the learned guard on labelled captions: hacks your policy found, honest captions of your domain.

    Exit codes: 0 done; 1 no row could be read; 2 bad input file, one class missing or scikit-learn absent."""
    from vlrl.core.pipeline import atomic_write_json
    from vlrl.rewards.guards.learned import read_labelled, train

    try:
        rows, errors = read_labelled(input, text_column, label_column)
    except OSError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    _say_skipped(errors)
    if not rows:
        typer.echo("error: no labelled row could be read (see the reasons above)", err=True)
        raise typer.Exit(1)
    try:
        model = train(rows, c=c, threshold=threshold)
    except (ImportError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    try:
        out = str(model.save(out))
    except OSError as e:
        typer.echo(f"error: cannot write {out}: {e}", err=True)
        raise typer.Exit(2) from None
    meta = model.meta
    summary = {"rows": len(rows), "hacks": meta["hacks"], "honest": meta["honest"], "errors": errors,
               "digest": meta["digest"], "threshold": threshold, "fit": meta["fit"]}
    if json_out:
        atomic_write_json(json_out, summary)
    typer.echo(f"{out}: trained on {meta['hacks']} hacks and {meta['honest']} honest captions ({len(errors)} rows skipped); "
               f"on its own training rows it catches {summary['fit']['recall']:.1%} of the hacks and flags "
               f"{summary['fit']['fpr']:.1%} of the honest captions (measure it on captions it has not seen)")


@app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help='Print [{"name", "module", "required_columns"}] as JSON.')) -> None:
    """Every registered reward, the module it lives in and the dataset columns it needs."""
    import json

    from vlrl.rewards import describe_rewards

    rows = describe_rewards()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        columns = ", ".join(r["required_columns"]) or "-"
        typer.echo(f"{r['name']:<{width}}  {r['module']}  (columns: {columns})")


@app.command("guard-families")
def guard_families_cmd(
    as_json: bool = typer.Option(False, "--json", help='Print [{"guard", "family", "view", "scope", "about", "default"}] as JSON.'),
) -> None:
    """Every family of every guard (the names `skip_families` and `extra_patterns` take), what it reads
    and what it fires on: guard by guard in the order a guard set runs them, each guard's families in
    table order."""
    import json

    from vlrl.rewards.guards import GUARDS, families_of

    guards = sorted(GUARDS, key=lambda n: GUARDS[n].rank)  # the order a guard set runs them in
    rows = [{"guard": g, "family": f.name, "view": f.view, "scope": f.scope, "about": f.about,
             "default": GUARDS[g].default} for g in guards for f in families_of(g)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    width = max(len(f"{r['guard']}/{r['family']}") for r in rows)
    for r in rows:
        opt = "" if r["default"] else "  (opt-in)"
        typer.echo(f"{r['guard'] + '/' + r['family']:<{width}}  {r['view']}/{r['scope']}  {r['about']}{opt}")
