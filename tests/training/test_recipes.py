"""Recipe loading, overrides and the validation that runs before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.support.paths import ROOT
from vlrl.core.prompts import render
from vlrl.training.recipe import RecipeError, load_recipe, resolve_tiny
from vlrl.training.validation import validate

RECIPES = ROOT / "train" / "recipes"


def _doc(**over):
    doc = {
        "method": "grpo",
        "model": {"path": "tiny:qwen2_5_vl"},
        "data": {"source": "builtin:tiny_math:4"},
        "rewards": [{"name": "hfrrf"}],
        "trainer": {"per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 16},
    }
    for k, v in over.items():
        doc[k] = v
    return doc


@pytest.fixture
def no_models(monkeypatch):
    """Fail loudly if validation tries to load or build any model."""
    import transformers

    def boom(*a, **k):
        raise AssertionError("a model was loaded during validation")

    for cls in ("AutoModelForImageTextToText", "AutoModelForCausalLM", "AutoProcessor", "AutoTokenizer"):
        monkeypatch.setattr(getattr(transformers, cls), "from_pretrained", boom)
    monkeypatch.setattr("vlrl.core.tiny.make_tiny", boom)
    monkeypatch.setenv("WORLD_SIZE", "1")


def test_overrides_are_yaml_and_bare_keys_go_to_trainer():
    r = load_recipe(
        doc=_doc(),
        overrides=["output_dir=/tmp/x", "trainer.learning_rate=1e-5", "model.lora={r: 4, alpha: 8}", "data.max_samples=3",
                   "stages=[{max_completion_length: 8, num_generations: 2, steps: 1}]"],
    )
    assert r.trainer["output_dir"] == "/tmp/x"
    assert r.trainer["learning_rate"] == pytest.approx(1e-5)  # a float, though PyYAML reads 1e-5 as text
    assert r.model.lora.r == 4 and r.model.lora.alpha == 8
    assert r.data.max_samples == 3
    assert r.stages[0].num_generations == 2


def test_bad_override_and_unknown_sections_are_named():
    with pytest.raises(RecipeError, match="key=value"):
        load_recipe(doc=_doc(), overrides=["learning_rate"])
    with pytest.raises(RecipeError, match="unknown section"):
        load_recipe(doc={**_doc(), "optimizer": {}})
    with pytest.raises(RecipeError, match="unknown key.*'model'"):
        load_recipe(doc=_doc(model={"path": "x", "freeze_vision": True}))


def test_shipped_tiny_recipes_validate_without_loading_models(no_models):
    for path in sorted((RECIPES / "tiny").glob("*.yaml")):
        r = load_recipe(path, ["output_dir=/tmp/unused"])
        validate(r)
        assert r.model.path.startswith("tiny:")  # nothing was built


@pytest.mark.parametrize("name", ["caprl_3b", "caprl_qwen3_vl_2b", "caprl_video_qwen3_vl_4b", "rubicap_7b", "vision_r1_7b_ptst",
                                  "vision_r1_7b_sft"])
def test_real_recipes_are_consistent_except_for_their_data(no_models, name, tmp_path):
    # Point the recipe at a tiny dataset with the columns it needs; everything else is as shipped.
    r = load_recipe(RECIPES / f"{name}.yaml")
    world = 4 if name.startswith(("caprl", "rubicap")) else 8
    need = {"caprl_3b": "builtin:tiny_captions:2", "caprl_qwen3_vl_2b": "builtin:tiny_captions:2",
            "rubicap_7b": "builtin:tiny_captions:2", "caprl_video_qwen3_vl_4b": "builtin:tiny_videos:2"}.get(name, "builtin:tiny_math:2")
    r.data.source = need
    validate(r, world=world)
    if name == "rubicap_7b":
        validate(r, world=5)


def test_impossible_geometry_says_what_to_change(no_models):
    r = load_recipe(doc=_doc(trainer={"per_device_train_batch_size": 3, "num_generations": 4}))
    with pytest.raises(RecipeError) as e:
        validate(r)
    msg = str(e.value)
    assert "not divisible by num_generations (4)" in msg and "per_device_train_batch_size=4" in msg
    # the world size counts: 4 × 1 × 3 processes = 12 is not a multiple of 8
    r = load_recipe(doc=_doc(trainer={"per_device_train_batch_size": 4, "num_generations": 8}))
    with pytest.raises(RecipeError, match="= 12"):
        validate(r, world=3)
    validate(r, world=2)
    # gradient accumulation (steps_per_generation's default) enlarges the generation batch
    validate(load_recipe(doc=_doc(trainer={"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4,
                                           "num_generations": 8})))
    with pytest.raises(RecipeError, match="at least 2"):
        validate(load_recipe(doc=_doc(trainer={"per_device_train_batch_size": 4, "num_generations": 1})))


def test_unknown_reward_and_trainer_key(no_models):
    r = load_recipe(doc=_doc(rewards=[{"name": "capri_qa"}], trainer={"per_device_train_batch_size": 4, "num_generations": 4,
                                                                      "learning_rat": 1e-5}))
    with pytest.raises(RecipeError) as e:
        validate(r)
    msg = str(e.value)
    assert "unknown reward 'capri_qa'" in msg and "caprl_qa" in msg  # lists what is registered
    assert "learning_rat (did you mean learning_rate?)" in msg  # both problems in one message
    with pytest.raises(RecipeError, match="cannot import"):
        validate(load_recipe(doc=_doc(rewards=[{"name": "no_such_pkg.mod:fn"}])))
    with pytest.raises(RecipeError, match="bad settings"):
        validate(load_recipe(doc=_doc(rewards=[{"name": "hfrrf", "settings": {"sofft": True}}])))
    with pytest.raises(RecipeError, match="bad guards"):
        validate(load_recipe(doc=_doc(rewards=[{"name": "hfrrf", "guards": {"policy": "maybe"}}])))


def test_missing_reward_column(no_models, tmp_path):
    # caprl_qa needs `questions`; the math set has none
    r = load_recipe(doc=_doc(data={"source": "builtin:tiny_math:2"},
                             rewards=[{"name": "caprl_qa", "settings": {"answerer": "hf:/nowhere"}}]))
    with pytest.raises(RecipeError, match=r"reward 'caprl_qa' needs dataset column\(s\) \['questions'\]"):
        validate(r)
    # a JSONL file: columns come from its records; hfrrf with answer_column=solution needs `solution`
    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps({"id": 1, "image": "a.png", "question": "1+1?", "answer": "2"}) + "\n")
    ok = load_recipe(doc=_doc(data={"source": str(src)}))
    validate(ok)
    bad = load_recipe(doc=_doc(data={"source": str(src)}, rewards=[{"name": "hfrrf", "settings": {"answer_column": "solution"}}]))
    with pytest.raises(RecipeError, match="solution"):
        validate(bad)
    with pytest.raises(RecipeError, match="does not exist"):
        validate(load_recipe(doc=_doc(data={"source": str(tmp_path / "missing.jsonl")})))


def test_stage_lists_that_trl_cannot_run(no_models):
    base = _doc(method="ptst")
    base["trainer"] = {"per_device_train_batch_size": 4}
    with pytest.raises(RecipeError, match="'stages' is empty"):
        validate(load_recipe(doc={**base, "stages": []}))
    with pytest.raises(RecipeError, match=r"stages\[1\].num_generations is 1"):
        validate(load_recipe(doc={**base, "stages": [{"max_completion_length": 8, "num_generations": 4, "steps": 1},
                                                     {"max_completion_length": 16, "num_generations": 1, "steps": 1}]}))
    with pytest.raises(RecipeError, match=r"stages\[0\].max_completion_length is -8"):
        validate(load_recipe(doc={**base, "stages": [{"max_completion_length": -8, "num_generations": 4, "steps": 1}]}))
    with pytest.raises(RecipeError, match=r"stages\[0\].steps is 0"):
        validate(load_recipe(doc={**base, "stages": [{"max_completion_length": 8, "num_generations": 4, "steps": 0}]}))
    with pytest.raises(RecipeError, match="exactly max_completion_length"):
        load_recipe(doc={**base, "stages": [{"max_completion_length": 8, "num_generations": 4}]})
    # 4 completions per step cannot hold whole groups of 16 (the default first stage)
    with pytest.raises(RecipeError, match="first stage's num_generations"):
        validate(load_recipe(doc={**base, "stages": None}))
    # a grpo recipe with stages is a mistake worth naming
    with pytest.raises(RecipeError, match="vlrl train ptst"):
        validate(load_recipe(doc={**_doc(), "stages": [{"max_completion_length": 8, "num_generations": 4, "steps": 1}]}))


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_ptst_plan_keeps_prompts_per_step_and_whole_groups(world):
    from vlrl.training.ptst import plan_stages

    r = load_recipe(doc={**_doc(method="ptst"), "trainer": {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8}})
    r.stages = None  # the default 4096/16 → 8192/8 → 16384/4
    plan = plan_stages(r, world)
    assert [p["num_generations"] for p in plan] == [16, 8, 4]
    assert [p["max_completion_length"] for p in plan] == [4096, 8192, 16384]
    prompts = {p["prompts_per_step"] for p in plan}
    assert prompts == {4 * 8 * world // 16}
    for p in plan:
        per_step = p["per_device_train_batch_size"] * p["gradient_accumulation_steps"] * world
        generation_batch = p["per_device_train_batch_size"] * p["steps_per_generation"] * world
        assert per_step == p["prompts_per_step"] * p["num_generations"]
        assert generation_batch % p["num_generations"] == 0
        assert p["per_device_train_batch_size"] <= 4
    # the plan is accepted by TRL's own config checks
    from trl import GRPOConfig

    for p in plan_stages(r, 1):
        GRPOConfig(output_dir="/tmp/unused", use_cpu=True, bf16=False, per_device_train_batch_size=p["per_device_train_batch_size"],
                   gradient_accumulation_steps=p["gradient_accumulation_steps"], steps_per_generation=p["steps_per_generation"],
                   num_generations=p["num_generations"], max_completion_length=p["max_completion_length"], report_to="none")


def test_ptst_plan_rejects_groups_that_cannot_split_over_processes():
    from vlrl.training.ptst import plan_stages

    r = load_recipe(doc={**_doc(method="ptst"), "ptst": {"prompts_per_step": 3},
                         "stages": [{"max_completion_length": 8, "num_generations": 2, "steps": 1}]})
    assert plan_stages(r, 2)[0]["gradient_accumulation_steps"] * plan_stages(r, 2)[0]["per_device_train_batch_size"] == 3
    with pytest.raises(RecipeError, match="multiple of 4"):
        plan_stages(r, 4)


def test_tiny_specs_are_resolved_everywhere(monkeypatch):
    import vlrl.training.recipe as rec

    monkeypatch.setattr(rec, "build_tiny", lambda arch, seed=0: Path(f"/cache/{arch}-{seed}"))
    r = load_recipe(doc=_doc(rewards=[{"name": "caprl_qa", "settings": {"answerer": "hf:tiny:qwen2?device=cpu"}},
                                      {"name": "x:y", "settings": {"judge": "hf:tiny:qwen2_vl:3", "other": "mytiny:qwen2"}}]))
    r = resolve_tiny(r)
    assert r.model.path == "/cache/qwen2_5_vl-0"
    assert r.rewards[0].settings["answerer"] == "hf:/cache/qwen2-0?device=cpu"
    assert r.rewards[1].settings["judge"] == "hf:/cache/qwen2_vl-3"
    assert r.rewards[1].settings["other"] == "mytiny:qwen2"


def test_dataset_adapter_keeps_prompts_conversational_and_columns_exact(tmp_path):
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import DataSpec

    (tmp_path / "img").mkdir()
    Image.new("RGB", (30, 20), "red").save(tmp_path / "img" / "a.png")
    recs = [
        {"id": "a", "image": "img/a.png", "questions": [{"question": "q?", "options": ["x", "y", "z"], "answer": "B"}]},
        {"id": "b", "image_path": "img/a.png", "prompt": "Own prompt.", "questions": [{"question": "q2?", "options": ["u", "v"], "answer": 0}],
         "rubrics": [{"criterion": "mentions red", "weight": 3.0}]},
        {"id": "c", "questions": []},  # no image: skipped with a warning
    ]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = to_trl_dataset(DataSpec(source=str(src), system_prompt="Be precise."), cache_dir=tmp_path / "cache")
    assert len(ds) == 2
    row0, row1 = ds[0], ds[1]
    assert row0["prompt"] == [{"role": "system", "content": "Be precise."},
                              {"role": "user", "content": render("caption_default")}]
    assert row1["prompt"][-1]["content"] == "Own prompt."
    assert row0["image"].size == (30, 20) and row0["image"].mode == "RGB"
    assert row0["questions"] == recs[0]["questions"]  # exact objects, no Arrow padding
    assert row1["questions"] == recs[1]["questions"] and row1["rubrics"] == recs[1]["rubrics"]
    assert row0["rubrics"] is None


def test_reasoning_prompt_template(tmp_path):
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import DataSpec

    ds = to_trl_dataset(DataSpec(source="builtin:tiny_math:2", prompt="Q: {{ question }} Use <think>."), cache_dir=tmp_path)
    row = ds[0]
    assert row["prompt"][0]["content"].startswith("Q: The image shows") and row["prompt"][0]["content"].endswith("Use <think>.")
    assert isinstance(row["answer"], str)


def test_cli_check_reports_errors_and_exit_code(tmp_path, no_models):
    from typer.testing import CliRunner

    from vlrl.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_doc(rewards=[{"name": "nope"}])))
    res = CliRunner().invoke(app, ["train", "check", "--recipe", str(bad)])
    assert res.exit_code == 2 and "unknown reward 'nope'" in res.output
    res = CliRunner().invoke(app, ["train", "check", "--recipe", str(RECIPES / "tiny" / "caprl_tiny.yaml")])
    assert res.exit_code == 0, res.output


@pytest.mark.parametrize("name,kind", [("single_gpu", "NO"), ("multi_gpu_ddp", "MULTI_GPU"), ("deepspeed_zero2", "DEEPSPEED"),
                                       ("deepspeed_zero3", "DEEPSPEED"), ("fsdp2", "FSDP")])
def test_accelerate_configs_follow_accelerates_schema(name, kind):
    from accelerate.commands.config.config_args import ClusterConfig

    path = ROOT / "train" / "accelerate" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text())
    cfg = ClusterConfig.from_yaml_file(str(path))  # raises on unknown keys / bad enum values
    assert cfg.distributed_type.value == kind
    if name.startswith("deepspeed"):
        assert cfg.deepspeed_config["zero_stage"] == int(name[-1])
    if name == "fsdp2":
        assert raw["fsdp_config"]["fsdp_version"] == 2
        assert raw["fsdp_config"]["fsdp_state_dict_type"] == "FULL_STATE_DICT"


def test_decreasing_length_cap_and_missing_local_model_fail_early(no_models, tmp_path):
    base = _doc(method="ptst")
    base["trainer"] = {"per_device_train_batch_size": 4}
    down = [{"max_completion_length": 24, "num_generations": 4, "steps": 1},
            {"max_completion_length": 12, "num_generations": 2, "steps": 1}]
    with pytest.raises(RecipeError, match=r"stages\[1\].max_completion_length \(12\) is below stages\[0\]'s \(24\)"):
        validate(load_recipe(doc={**base, "stages": down}))
    equal = [{**down[0], "max_completion_length": 12}, down[1]]
    validate(load_recipe(doc={**base, "stages": equal}))  # equal caps (e.g. a shrinking group only) are fine
    with pytest.raises(RecipeError, match="is not a folder"):
        validate(load_recipe(doc=_doc(model={"path": str(tmp_path / "no-model")})))
    validate(load_recipe(doc=_doc(model={"path": "Qwen/Qwen2.5-VL-3B-Instruct"})))  # a hub id is not checked


def test_empty_dataset_is_named_as_empty(no_models, tmp_path):
    empty = tmp_path / "sft.jsonl"
    empty.write_text("")  # e.g. `vlrl data cold-start` that kept nothing
    with pytest.raises(RecipeError, match="holds no records") as e:
        validate(load_recipe(doc={**_doc(method="sft"), "data": {"source": str(empty)}}))
    assert "has no 'image' column" not in str(e.value)


def test_dataset_adapter_skips_missing_and_corrupt_images_up_front(tmp_path, caplog):
    # Regression: a missing or non-image file passed the adapter and crashed the trainer's data
    # loader mid-run (after the models were loaded); now the record is skipped with a warning.
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.recipe import DataSpec

    Image.new("RGB", (16, 16), "blue").save(tmp_path / "ok.png")
    (tmp_path / "bad.jpg").write_bytes(b"<html>404</html>")
    recs = [{"id": "ok", "image": "ok.png"}, {"id": "bad", "image": "bad.jpg"}, {"id": "gone", "image": "gone.png"}]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with caplog.at_level("WARNING"):
        ds = to_trl_dataset(DataSpec(source=str(src)), cache_dir=tmp_path / "cache")
    assert len(ds) == 1 and ds[0]["id"] == "ok" and ds[0]["image"].size == (16, 16)
    assert "record bad:" in caplog.text and "record gone:" in caplog.text and "not found" in caplog.text


def test_sft_adapter_resolves_relative_images_like_grpo_and_skips_bad_ones(tmp_path, monkeypatch):
    # Regression: SFT resolved relative image paths against the working directory (GRPO: the data
    # file's folder) and let missing/corrupt files through to crash the trainer mid-run.
    from vlrl.training.recipe import DataSpec
    from vlrl.training.sft import to_sft_dataset

    (tmp_path / "data" / "img").mkdir(parents=True)
    Image.new("RGB", (12, 10), "green").save(tmp_path / "data" / "img" / "a.png")
    (tmp_path / "data" / "img" / "bad.png").write_bytes(b"\x89PNG broken")
    resp = "<think>x</think><answer>1</answer>"
    recs = [{"id": "a", "image": "img/a.png", "question": "q", "response": resp},
            {"id": "bad", "image": "img/bad.png", "question": "q", "response": resp},
            {"id": "gone", "image": "img/gone.png", "question": "q", "response": resp}]
    src = tmp_path / "data" / "sft.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.chdir(tmp_path)  # not the data folder
    ds = to_sft_dataset(DataSpec(source=str(src), response_column="response"), cache_dir=tmp_path / "cache")
    assert len(ds) == 1 and ds[0]["image"].size == (12, 10)
    assert ds[0]["completion"] == [{"role": "assistant", "content": resp}]


def test_prompt_names_a_template(no_models, tmp_path):
    """A recipe names CapRL's prompt template instead of copying its text; a wrong name fails validation."""
    from vlrl.core.sources.rows import read_row
    from vlrl.training.data import user_text

    r = load_recipe(doc=_doc(data={"source": "builtin:tiny_captions:2"}))
    assert r.data.prompt == "caption_default.jinja" and user_text(read_row({}, 0), r.data.prompt) == render("caption_default")
    own = tmp_path / "mine.jinja"
    own.write_text("Caption {{ id }} in one line.\n")
    assert user_text(read_row({"id": "x7"}, 0), str(own)) == "Caption x7 in one line."
    with pytest.raises(RecipeError, match="data.prompt.*no_such_prompt.jinja"):
        validate(load_recipe(doc=_doc(data={"source": "builtin:tiny_math:4", "prompt": "no_such_prompt.jinja"})))


def test_real_recipes_set_schedule_and_loss_explicitly():
    """TRL's defaults (linear decay, loss_type dapo) silently decide otherwise; PTST stages would each
    decay to 0. The Vision-R1 SFT recipe carries the public settings."""
    import configparser

    extras = configparser.ConfigParser()
    extras.read(ROOT / "setup.cfg")
    provided = set(extras["options.extras_require"])
    for path in sorted(RECIPES.glob("*.yaml")):
        r = load_recipe(path)
        assert "lr_scheduler_type" in r.trainer, path.name
        if r.method in ("grpo", "ptst"):
            assert r.trainer.get("loss_type") == "grpo", path.name  # the papers train with GRPO
        if r.method == "ptst":
            assert r.trainer["lr_scheduler_type"].startswith("constant"), path.name
        for name in (r.trainer.get("report_to") or []):
            assert name in provided, f"{path.name}: report_to {name} has no extra in setup.cfg"
    sft = load_recipe(RECIPES / "vision_r1_7b_sft.yaml").trainer
    assert (sft["learning_rate"], sft["warmup_steps"], sft["max_length"]) == (5e-6, 0.05, 16384)


def test_the_one_dispatch_refuses_an_unknown_method_instead_of_running_sft():
    """``vlrl.training.entry.run`` picks the trainer by ``recipe.method``; a typo must not fall
    through to its last branch (SFT) and train something nobody asked for."""
    from types import SimpleNamespace

    from vlrl.training.entry import run
    from vlrl.training.recipe import RecipeError

    with pytest.raises(RecipeError, match="'sfft' is unknown"):
        run(SimpleNamespace(method="sfft"))


def test_scripts_and_the_cli_take_the_options_of_one_table():
    """``train/<method>.py`` (argparse) and ``vlrl train <method>`` (typer) are built from one table:
    the same parameters, in the same order, parsed to the same values."""
    import typer.main

    from vlrl.cli.train import app
    from vlrl.training.entry import COMMANDS, options_for, parse_args

    group = typer.main.get_command(app)
    assert set(group.commands) == set(COMMANDS)
    for name in COMMANDS:
        assert [p.name for p in group.commands[name].params] == [o.name for o in options_for(name)]
    argv = ["--recipe", "r.yaml", "--no-resume", "--force", "output_dir=d", "max_steps=2"]
    parsed = vars(parse_args(argv, method="grpo"))
    assert parsed == {"recipe": "r.yaml", "resume": False, "force": True, "overrides": ["output_dir=d", "max_steps=2"]}
    assert group.commands["grpo"].make_context("grpo", list(argv)).params == parsed
    with pytest.raises(SystemExit):  # SFT takes no --resume, in either
        parse_args(["--recipe", "r.yaml", "--no-resume"], method="sft")


def test_video_recipes_need_trls_own_generation(no_models):
    """Video rows with vLLM rollouts (TRL 1.16 passes images only) or SFT stop before a model loads."""
    r = load_recipe(RECIPES / "caprl_video_qwen3_vl_4b.yaml", ["trainer.use_vllm=true"])
    r.data.source = "builtin:tiny_videos:2"
    with pytest.raises(RecipeError, match="use_vllm: false"):
        validate(r, world=4)
    r = load_recipe(RECIPES / "caprl_video_qwen3_vl_4b.yaml", ["data.video={fps: 2, frames_per_second: 3}"])
    r.data.source = "builtin:tiny_videos:2"
    with pytest.raises(RecipeError, match="data.video"):
        validate(r, world=4)
