"""Fail fast and resume semantics of `vlrl train`: probes, value checks, run identity, finished runs,
schedule re-planning, the all-None reward stop, and PTST's one data stream (no models trained here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT
from tests.support.training import two_image_source
from vlrl.training.recipe import RecipeError, load_recipe
from vlrl.training.validation import validate

TINY = ROOT / "train" / "recipes" / "tiny"


def _doc(**over):
    doc = {
        "method": "grpo",
        "model": {"path": "tiny:qwen2_5_vl"},
        "data": {"source": "builtin:tiny_math:4"},
        "rewards": [{"name": "hfrrf"}],
        "trainer": {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 16},
    }
    doc.update(over)
    return doc


def _cli(*args):
    from vlrl.cli import app

    return CliRunner().invoke(app, list(args))


# -- probes ----------------------------------------------------------------------------------------


def test_train_check_fails_on_a_dead_hf_answerer():
    res = _cli("train", "check", "--recipe", str(TINY / "caprl_tiny.yaml"), "rewards.0.settings.answerer=hf:/nonexistent")
    assert res.exit_code == 2, res.output
    assert "rewards[0] (caprl_qa) settings.answerer" in res.output and "no such model folder" in res.output
    # --no-probe checks only what the recipe says
    assert _cli("train", "check", "--no-probe", "--recipe", str(TINY / "caprl_tiny.yaml"),
                "rewards.0.settings.answerer=hf:/nonexistent").exit_code == 0


def test_hf_folder_without_a_loadable_config(tmp_path):
    from vlrl.training.preflight import probe_backend

    (tmp_path / "config.json").write_text("{not json")
    assert "config does not load" in probe_backend(f"hf:{tmp_path}")


class _Models(BaseHTTPRequestHandler):
    body = b'{"object": "list", "data": [{"id": "served-model", "object": "model"}]}'
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


@pytest.fixture
def models_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_openai_probe_needs_the_server_and_the_model(models_server):
    from tests.support.servers import free_port
    from vlrl.training.preflight import probe_backend

    assert probe_backend(f"openai:{models_server}@served-model") is None
    assert "serves no model 'other'" in probe_backend(f"openai:{models_server}@other")
    dead = probe_backend(f"openai:http://127.0.0.1:{free_port()}/v1@served-model")
    assert "no answer" in dead and "start the server" in dead


def test_openai_probe_rejects_a_non_json_models_page(models_server, monkeypatch):
    from vlrl.training.preflight import probe_backend

    monkeypatch.setattr(_Models, "body", b"<html>hello</html>")
    assert "did not return JSON" in probe_backend(f"openai:{models_server}@served-model")
    monkeypatch.setattr(_Models, "status", 404)
    assert "HTTP 404" in probe_backend(f"openai:{models_server}@served-model")


def test_required_packages_are_checked_up_front(monkeypatch):
    from vlrl.training import preflight

    installed = {"peft"}
    monkeypatch.setattr(preflight, "has_package", lambda name: name in installed)
    r = load_recipe(doc=_doc(model={"path": "tiny:qwen2_5_vl", "attn_implementation": "flash_attention_2",
                                    "lora": {"r": 4}},
                             trainer={"report_to": ["wandb", "tensorboard"], "use_vllm": True, "deepspeed": "z3.json"}))
    msgs = preflight.package_problems(r)
    joined = "\n".join(msgs)
    for pip in ("wandb", "tensorboard", "vllm", "deepspeed", "flash-attn"):
        assert f"pip install {pip}" in joined
    assert "peft" not in joined
    assert "or remove it from report_to" in joined
    installed |= {"wandb", "tensorboard", "vllm", "deepspeed", "flash_attn"}
    assert preflight.package_problems(r) == []


def test_completion_cap_beyond_the_context_is_found(tiny_vlm):
    from transformers import AutoConfig

    from vlrl.training.preflight import length_problems

    cfg = AutoConfig.from_pretrained(tiny_vlm)
    limit = (getattr(cfg, "text_config", None) or cfg).max_position_embeddings
    r = load_recipe(doc=_doc(model={"path": str(tiny_vlm)}, trainer={"max_completion_length": limit + 1}))
    assert "does not fit the policy's context" in length_problems(r)[0]
    r.trainer["max_completion_length"] = 16
    assert length_problems(r) == []


# -- values and YAML -------------------------------------------------------------------------------


@pytest.mark.parametrize("key,value,expect", [
    ("learning_rate", -1e-5, "must be > 0"),
    ("learning_rate", float("nan"), "must be finite"),
    ("learning_rate", "fast", "it must be a number"),
    ("per_device_train_batch_size", 0, "must be ≥ 1"),
    ("temperature", -0.5, "must be ≥ 0"),
    ("max_completion_length", 2.5, "must be an integer"),
    ("top_p", 1.5, "in (0, 1]"),
])
def test_out_of_range_values_are_named(key, value, expect):
    trainer = {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 16, key: value}
    with pytest.raises(RecipeError) as e:
        validate(load_recipe(doc=_doc(trainer=trainer)), world=1)
    assert f"trainer.{key}" in str(e.value) and expect in str(e.value)


def test_pixel_budget_and_run_values():
    with pytest.raises(RecipeError, match="min_pixels .* is above data.max_pixels"):
        validate(load_recipe(doc=_doc(data={"source": "builtin:tiny_math:4", "min_pixels": 2000, "max_pixels": 1000})), world=1)
    with pytest.raises(RecipeError, match="run.max_none_reward_steps"):
        validate(load_recipe(doc=_doc(run={"max_none_reward_steps": -1})), world=1)


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    lines.append("trainer: {foo: *a11}")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecipeError, match="YAML aliases"):
        load_recipe(p)
    with pytest.raises(RecipeError, match="YAML aliases"):
        load_recipe(doc=_doc(), overrides=["trainer.x=" + "[" + ", ".join(["&a [1]"] + ["*a"] * 80) + "]"])


# -- run identity, finished runs, schedules --------------------------------------------------------


def test_a_different_run_in_output_dir_is_refused_with_the_differences(tmp_path):
    from vlrl.training.runstate import check_identity, write_identity

    old = load_recipe(doc=_doc(trainer={"output_dir": str(tmp_path), "learning_rate": 1e-5, "max_steps": 3}))
    write_identity(old, tmp_path)
    same = load_recipe(doc=_doc(trainer={"output_dir": str(tmp_path), "learning_rate": 1e-5, "max_steps": 9,
                                         "logging_steps": 5}))
    check_identity(same, tmp_path)  # more steps or other logging: the same run
    other = load_recipe(doc=_doc(trainer={"output_dir": str(tmp_path), "learning_rate": 3e-5, "max_steps": 3},
                                 rewards=[{"name": "hfrrf", "settings": {"soft": True}}]))
    with pytest.raises(RecipeError) as e:
        check_identity(other, tmp_path)
    msg = str(e.value)
    assert "trainer.learning_rate: 1e-05 → 3e-05" in msg and "--force" in msg and "soft" in msg
    check_identity(other, tmp_path, force=True)


def test_another_max_samples_is_another_run(tmp_path):
    """The sampler shuffles by the dataset's length, so a resume with another data.max_samples would
    reorder the stream and show a PTST stage rows it already trained on (#30 finding 3)."""
    from vlrl.training.runstate import check_identity, write_identity

    stages = [{"max_completion_length": 8, "num_generations": 4, "steps": 1},
              {"max_completion_length": 16, "num_generations": 4, "steps": 1}]
    for method, extra in (("grpo", {}), ("ptst", {"stages": stages})):
        out = tmp_path / method
        def recipe(n, out=out, method=method, extra=extra):
            return load_recipe(doc=_doc(method=method, data={"source": "builtin:tiny_math:12", "max_samples": n},
                                        trainer={"output_dir": str(out), "per_device_train_batch_size": 4,
                                                 "num_generations": 4, "max_completion_length": 16}, **extra))
        write_identity(recipe(10), out)
        check_identity(recipe(10), out)
        with pytest.raises(RecipeError, match=r"data\.max_samples: 10 → 12"):
            check_identity(recipe(12), out)


def test_finished_run_is_reported_and_extension_needs_its_final_checkpoint(tmp_path):
    from vlrl.training.runstate import finished_metrics

    (tmp_path / "metrics.json").write_text(json.dumps({"finished": True, "global_step": 3, "max_steps": 3}))
    ck = tmp_path / "checkpoint-2"
    ck.mkdir()
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    assert finished_metrics(tmp_path, 3, ck)["global_step"] == 3
    assert finished_metrics(tmp_path, None, ck)["global_step"] == 3
    with pytest.raises(RecipeError, match="model.path=.* output_dir=NEW_DIR max_steps=2"):
        finished_metrics(tmp_path, 5, ck)
    ck3 = tmp_path / "checkpoint-3"
    ck3.mkdir()
    (ck3 / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    assert finished_metrics(tmp_path, 5, ck3) is None  # resumable exactly where it ended


@pytest.mark.parametrize("kind", ["linear", "cosine", "constant_with_warmup"])
def test_raising_max_steps_replans_the_schedule_instead_of_a_step_at_lr_0(kind):
    import torch
    from transformers import get_scheduler

    from vlrl.training.runstate import replan_lr

    def build(total):
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
        return opt, get_scheduler(kind, opt, num_warmup_steps=1, num_training_steps=total)

    opt, sch = build(3)
    for _ in range(3):
        opt.step()
        sch.step()
    saved_opt, saved_sch = opt.state_dict(), sch.state_dict()
    opt2, sch2 = build(6)  # what Trainer does on resume: new schedule, then the checkpoint's states
    opt2.load_state_dict(saved_opt)
    sch2.load_state_dict(saved_sch)
    before = opt2.param_groups[0]["lr"]
    replan_lr(sch2, opt2)
    after = opt2.param_groups[0]["lr"]
    fresh_opt, fresh = build(6)
    for _ in range(3):
        fresh_opt.step()
        fresh.step()
    assert after == pytest.approx(fresh_opt.param_groups[0]["lr"])  # as if planned for 6 steps from the start
    assert after > 0
    if kind != "constant_with_warmup":
        assert before == 0.0  # the bug replan_lr fixes: the old schedule's last value


def test_none_reward_guard_stops_after_k_steps_and_resets_on_signal():
    import torch

    from vlrl.training.runstate import NoneRewardGuard, RunFailed

    g = NoneRewardGuard(2)
    nan = torch.full((4, 2), float("nan"))
    some = nan.clone()
    some[1, 0] = 0.0
    g.observe(nan)
    g.observe(some)  # one real reward resets the streak
    g.observe(nan)
    with pytest.raises(RunFailed, match="every reward was None for 2 consecutive steps"):
        g.observe(nan)
    NoneRewardGuard(0).observe(nan)  # 0 turns the stop off


# -- PTST data stream ------------------------------------------------------------------------------


def test_ptst_stages_continue_the_data_stream():
    import datasets

    from vlrl.training.ptst import stage_dataset, stage_offsets

    plan = [{"prompts_per_step": 2, "max_steps": 3}, {"prompts_per_step": 2, "max_steps": 2}, {"prompts_per_step": 2, "max_steps": 4}]
    assert stage_offsets(plan) == [0, 6, 10]
    ds = datasets.Dataset.from_dict({"id": list(range(20))})
    seen = [stage_dataset(ds, 7, off)["id"][: sp["prompts_per_step"] * sp["max_steps"]]
            for sp, off in zip(plan, stage_offsets(plan), strict=True)]
    flat = [i for s in seen for i in s]
    assert len(flat) == len(set(flat)) == 18  # no prompt is replayed while unseen ones remain
    assert stage_dataset(ds, 7, 0)["id"] != list(range(20))  # shuffled once for the run
    assert sorted(stage_dataset(ds, 7, 25)["id"]) == list(range(20))  # wraps around, keeps every row


def test_several_images_per_sample_reach_the_trainer_rows(tmp_path):
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import DataSpec

    ds = to_trl_dataset(DataSpec(source=str(two_image_source(tmp_path)), prompt="{{ question }}"), cache_dir=tmp_path / "c")
    row = ds[0]
    assert "images" in row and len(row["images"]) == 2
    assert row["images"][0].getpixel((0, 0)) != row["images"][1].getpixel((0, 0))  # two different images, in order


def test_reward_health_counts_floors_and_backend_failures_not_only_none():
    """A dead answerer behind a guard that fires on every caption: its Nones pass through the guard
    (#30 finding 2c; before, each became the floor -1.0 and the values alone looked healthy), beside a
    reward that still scores, and the rule reads each reward's health (finding 2 of #24)."""
    import torch

    from vlrl.rewards.base import BACKEND_FAILED, Reward, Score
    from vlrl.rewards.guards import with_guards
    from vlrl.training.runstate import NoneRewardGuard, RunFailed

    class DeadAnswerer(Reward):
        name = "caprl_qa"
        answerer = "openai:http://127.0.0.1:9/v1@dead"

        def __init__(self):
            self.alive = False

        def score(self, completions, **columns):
            if self.alive:
                return [Score(0.5) for _ in completions]
            return [Score(None, {BACKEND_FAILED: 1}) for _ in completions]

    inner = DeadAnswerer()
    guarded = with_guards(inner, policy="veto", floor=-1.0, enabled=["length"], length={"min_words": 1000})

    class Fine(Reward):
        name = "format"

        def score(self, completions, **columns):
            return [Score(float(i % 2)) for i in range(len(completions))]

    fine = Fine()
    g = NoneRewardGuard(2)

    def step():
        values = torch.tensor([[float("nan") if v is None else v, f]
                               for v, f in zip(guarded(completions=["a b"] * 4), fine(completions=["x"] * 4), strict=True)],
                              dtype=torch.float32)
        assert bool(torch.isnan(values[:, 0]).all())  # None, not the guard's floor
        assert not torch.isnan(values[:, 1]).any()
        g.observe(values, [guarded, fine])

    step()
    with pytest.raises(RunFailed, match=r"reward caprl_qa had no signal for 2 consecutive steps.*127\.0\.0\.1:9/v1@dead"):
        step()
    # backend failures that stand in as 0.0 (on_judge_failure=zero) count the same way
    h = NoneRewardGuard(1)
    zero = Reward.__new__(DeadAnswerer)
    zero.score = lambda completions, **kw: [Score(0.0, {BACKEND_FAILED: 1}) for _ in completions]
    with pytest.raises(RunFailed, match="no signal"):
        h.observe(torch.tensor([[v] for v in zero(completions=["x"] * 3)]), [zero])
    ok = NoneRewardGuard(1)  # a working reward with a spread of values never counts
    ok.observe(torch.tensor([[0.0], [1.0]]), [fine])
    fine(completions=["x", "y"])
    ok.observe(torch.tensor([[0.0], [1.0]]), [fine])
    NoneRewardGuard(0).observe(torch.tensor([[-1.0]]), [guarded])  # 0 turns the stop off


# -- the TRL config a recipe builds (#30 finding 11) -----------------------------------------------


@pytest.mark.parametrize("overrides, says", [
    (["trainer.loss_type=grpoo"], "trainer.loss_type is 'grpoo'; TRL supports"),  # failed after the first rollout
    (["trainer.lr_scheduler_type=cosinee"], "GRPOConfig refuses it: ValueError: cosinee is not a valid SchedulerType"),
    (["model.attn_implementation=sdpaa"], "model.attn_implementation is 'sdpaa'"),
    (["trainer.gradient_checkpointing=maybe"], "trainer.gradient_checkpointing is 'maybe'; it must be true or false"),
    (["trainer.epsilon=0.2", "trainer.epsilon_high=0.1"], "trainer.epsilon_high (0.1) is below trainer.epsilon (0.2)"),
    # #30 audit: more strings TRL only reads inside the first step, after the first rollout
    (["trainer.scale_rewards=maybe"], "trainer.scale_rewards is 'maybe'; TRL supports batch, group, none"),
    (["trainer.importance_sampling_level=tokn"], "trainer.importance_sampling_level is 'tokn'; TRL supports sequence, token"),
    (["trainer.multi_objective_aggregation=sum"], "trainer.multi_objective_aggregation is 'sum'; TRL supports"),
    (["trainer.repetition_penalty=0"], "trainer.repetition_penalty is 0; it must be > 0"),  # failed at the first generate
    (["trainer.top_k=-5"], "trainer.top_k is -5; it must be ≥ 0"),
    (["trainer.adam_beta1=2"], "trainer.adam_beta1 is 2; it must be in [0, 1)"),  # failed building the optimizer
    (["trainer.reward_weights=[1, 2]"], "trainer.reward_weights is set, but each reward's weight comes from its"),  # ignored
])
def test_train_check_builds_the_trl_config_and_refuses_what_fails_at_start(overrides, says):
    res = _cli("train", "check", "--recipe", str(TINY / "caprl_tiny.yaml"), *overrides)
    assert res.exit_code == 2, res.output
    assert says in res.output
    problem_lines = [ln for ln in res.output.splitlines() if ln.strip().startswith("- ")]
    assert len(problem_lines) == 1, res.output  # one line, not a traceback


@pytest.mark.parametrize("value", ["true", "false", "group", "batch", "none"])
def test_train_check_takes_every_scale_rewards_value_trl_documents(value):
    """GRPOConfig annotates scale_rewards as a string but documents (and converts) true and false too; Dr. GRPO
    recipes write `scale_rewards: false` (#30 audit: check refused it as 'must be str')."""
    res = _cli("train", "check", "--recipe", str(TINY / "caprl_tiny.yaml"), f"trainer.scale_rewards={value}")
    assert res.exit_code == 0, res.output


def test_an_optimizer_whose_package_is_missing_is_refused(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    res = _cli("train", "check", "--recipe", str(TINY / "caprl_tiny.yaml"), "trainer.optim=adamw_bnb_8bit")
    assert res.exit_code == 2 and "trainer.optim is 'adamw_bnb_8bit' but bitsandbytes is not installed" in res.output


def test_liger_kernels_without_their_package_are_refused(monkeypatch):
    """transformers applies them when training starts, after the policy loaded (#30 audit)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "liger_kernel" else real(name, *a))
    res = _cli("train", "check", "--recipe", str(TINY / "caprl_tiny.yaml"), "trainer.use_liger_kernel=true")
    assert res.exit_code == 2 and "trainer.use_liger_kernel is true but liger-kernel is not installed" in res.output


def test_every_shipped_recipe_builds_its_trl_config():
    from vlrl.training.config_check import config_problems

    for path in sorted((ROOT / "train" / "recipes").rglob("*.yaml")):
        assert config_problems(load_recipe(path)) == [], path


def test_a_ptst_resume_with_another_max_samples_is_refused_through_the_cli(tmp_path):
    """The audit's case through `vlrl train ptst`: a run started with data.max_samples=10 is not resumed
    with 12 (its stream would be reshuffled and stage 2 would see rows it trained on)."""
    from vlrl.training.runstate import prepare, write_identity

    out = tmp_path / "ptst"
    recipe = TINY / "vision_r1_tiny_ptst.yaml"
    write_identity(prepare(load_recipe(recipe, [f"output_dir={out}", "data.max_samples=10"])), out)  # as a run writes it
    res = _cli("train", "ptst", "--recipe", str(recipe), f"output_dir={out}", "data.max_samples=12")
    assert res.exit_code == 2, res.output
    assert [ln.strip() for ln in res.output.splitlines() if "→" in ln][1:] == ["data.max_samples: 10 → 12"]  # only that
    assert "--force" in res.output
    assert not (out / "stage-1").exists()  # refused before training anything


def _math_jsonl(path, n):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        Image.new("RGB", (32, 32), (10 * i, 80, 160)).save(path.parent / f"img{i}.png")
        rows.append(json.dumps({"image": f"img{i}.png", "question": f"What is {i} + 1?", "answer": str(i + 1)}))
    path.write_text("\n".join(rows) + "\n")


def test_a_resume_on_a_data_file_rewritten_in_place_is_refused_through_the_cli(tmp_path):
    """The recipe names the file, but the shuffled stream is drawn from the rows the file gives: a file
    rewritten in place (one more row here) reshuffles the stream under an unchanged recipe, so a PTST
    resume would show stage 2 rows it trained on (#30 audit, beyond finding 3)."""
    from vlrl.training.ptst import open_ptst

    out, data = tmp_path / "ptst", tmp_path / "data" / "math.jsonl"
    recipe = TINY / "vision_r1_tiny_ptst.yaml"
    args = [f"output_dir={out}", f"data.source={data}"]
    _math_jsonl(data, 10)
    open_ptst(load_recipe(recipe, args))  # as a run's start records it
    open_ptst(load_recipe(recipe, args))  # the same data: the same run
    _math_jsonl(data, 12)
    res = _cli("train", "ptst", "--recipe", str(recipe), *args)
    assert res.exit_code == 2, res.output
    assert "10 rows" in res.output and "12 rows" in res.output and "--force" in res.output
    assert not (out / "stage-1").exists()  # refused before training anything
    open_ptst(load_recipe(recipe, args), force=True)  # --force adopts the new data ...
    open_ptst(load_recipe(recipe, args))  # ... and a later resume on it is the same run


def test_a_grpo_resume_on_another_number_of_processes_is_refused_through_the_cli(tmp_path):
    """A GRPO resume skips the batches already trained per process: with another world size it skips
    another share of the shuffled stream (and trains another global batch), so it is another run unless
    --force (#30 audit). PTST re-plans its per-device batches instead and is not concerned."""
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.runstate import check_data_stream, open_run

    out = tmp_path / "grpo"
    recipe = TINY / "caprl_tiny.yaml"
    run = open_run(load_recipe(recipe, [f"output_dir={out}"]))
    # what a 2-process start records (run_grpo under torchrun, WORLD_SIZE=2)
    check_data_stream(to_trl_dataset(run.recipe.data, cache_dir=out / "_data"), out, world=2)
    res = _cli("train", "grpo", "--recipe", str(recipe), f"output_dir={out}")
    assert res.exit_code == 2, res.output
    assert "training processes: 2 → 1" in res.output and "--force" in res.output
    assert not list(out.glob("checkpoint-*"))  # refused before training anything
