"""``vlrl demo --method vision-r1``: the Vision-R1 loop in the shapes world, on a laptop CPU.

Stages (markers under ``DIR/state``; an interrupted run resumes where it stopped):

1. **warm starts** (cached under the demo cache by settings hash and seed):
   the CapRL demo's tiny Qwen2.5-VL captioner (:mod:`vlrl.demos.shapes.tiny_models.warmstart`, trained on
   shapes-world captions only), then the **student**: the captioner after
   *modality-bridging cold start + SFT*. The cold start is the project's
   (:func:`vlrl.methods.vision_r1.cold_start.cold_start`, what ``vlrl data cold-start`` runs) with
   two documented rule-based stand-ins behind the ``py:`` backend seam
   (:mod:`vlrl.demos.shapes.standins.reasoning`): a VLM that reads the pixels by rule and sometimes
   mis-perceives, and a text reasoner that solves from the description alone. Only samples whose
   answer HFRRF's checker calls right are kept. SFT is the project's (:func:`vlrl.training.sft.run_sft`,
   what ``vlrl train sft`` runs, TRL's SFTTrainer) on those kept chains.
2. **data** — RL problems from the world's training layouts, and held-out problems from its held-out
   layouts, so they share no layout, (layout, question) pair or image with the cold start's
   problems, the RL problems or the captioner's SFT images (:func:`write_splits`).
3. **evaluation before RL** (i.e. after the SFT cold start) — the project's reasoning evaluation
   (:func:`vlrl.methods.vision_r1.evaluate.evaluate_reasoning`, what ``vlrl eval reasoning`` runs):
   greedy, one try per problem, accuracy read by HFRRF's own answer extraction and checker against
   the generated gold answer, format rate and mean completion tokens; beside it the unbiased pass@k
   (k = 1, 4, 8) of ``eval_samples`` samples per problem at the rollout temperature, overall and per
   problem kind: what GRPO with an outcome reward can lift greedy accuracy towards.
4. **PTST** (:func:`vlrl.training.ptst.run_ptst`, what ``vlrl train ptst`` runs) with ``hfrrf``:
   a short length cap with a large group, then a longer cap with a smaller group, same prompts per step.
5. **single-stage GRPO** (:func:`vlrl.training.grpo.run_grpo`) from the same student with the same
   reward, the same number of steps and of sampled completions, the final stage's length cap and
   the stages' mean group size: the baseline PTST is reported beside.
6. evaluation of both, ``metrics.json`` and ``report.html``.

The accuracy judge here is the gold answer of a generated problem, checked by the same code as the
reward (no learned model can be hacked into agreeing); the reward never sees held-out problems.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json, read_jsonl, write_jsonl
from vlrl.core.prompts import template_path
from vlrl.demos.shapes.kit import problems as P
from vlrl.demos.shapes.kit import world as W
from vlrl.demos.shapes.kit.base import DemoSettings, hf_spec, open_run, timing
from vlrl.demos.shapes.kit.cache import cached
from vlrl.demos.shapes.kit.history import CALLBACK, read_history, window_mean
from vlrl.demos.shapes.kit.recipes import grpo_trainer, run_recipe, save_recipe
from vlrl.demos.shapes.tiny_models.captioner import train_captioner
from vlrl.demos.shapes.tiny_models.settings import WarmStartConfig
from vlrl.demos.shapes.tiny_models.warmstart import build_tokenizer, paths

STANDINS = "py:vlrl.demos.shapes.standins.reasoning"
"""The cold start's rule-based VLM and reasoner (:mod:`vlrl.demos.shapes.standins.reasoning`)."""

logger = logging.getLogger(__name__)

EVAL_PROMPT = "shapes_reason"
STUDENT_VERSION = 2


@dataclass(frozen=True)
class VR1Config(DemoSettings):
    seed: int = 0
    quick: bool = False
    # cold start + SFT (the cached student)
    questions: str = "item_mix"
    """The question set (:data:`vlrl.demos.shapes.kit.problems.QUESTION_SETS`): ``item_mix`` asks for the larger
    or smaller shape or the shape that is not a colour, by name (12–13 answers; ``items`` the first alone);
    ``counts`` the earlier count / *not* / larger kinds (three answers each, what ``--rechecks`` uses);
    ``others`` the *not ‹colour›* kind alone (an experiment)."""
    cold_start_problems: int = 800
    vlm_error_rate: float = 0.1
    reasoner_rechecks: int = 0
    """The stand-in reasoner re-states its step 0..N extra times (overthinking; see :func:`vlrl.demos.shapes.standins.reasoning.reasoner`)."""
    reasoner_styles: int = 3
    """Routes per question kind the stand-in reasoner writes (:func:`vlrl.demos.shapes.standins.reasoning.solve_varied`)."""
    reasoner_slip: float = 0.25
    """Rate of the reasoner's reasoned mistakes (miscounting under clutter, comparing the wrong pair)."""
    reasoner_glance: float = 0.0
    """Share of problems the stand-in reasoner answers at a glance, without the scene or the step
    (:func:`vlrl.demos.shapes.standins.reasoning.reasoner`). Off: measured, it gives GRPO a route to
    choose but no gain over the student without it (docs/demo-vision-r1.md, "A reasoner that answers
    some problems at a glance")."""
    sft_steps: int = 400
    sft_batch: int = 16
    sft_lr: float = 2e-3
    # RL
    prompts_per_step: int = 4
    stages: tuple[tuple[int, int, int], ...] = ((72, 8, 30), (96, 4, 30))
    """PTST stages: (max_completion_length, num_generations, steps). The longest correct chain of this
    task is 63 tokens with EOS, so stage 1's cap of 72 leaves little room to ramble; stage 2 loosens it."""
    learning_rate: float = 1e-4
    temperature: float = 1.0
    eval_problems: int = 150
    eval_samples: int = 8
    """Samples per held-out problem at the rollout temperature, for the unbiased pass@k (k = 1, 4, 8)."""
    warm: WarmStartConfig = field(default_factory=WarmStartConfig)

    @classmethod
    def make(cls, seed: int = 0, quick: bool = False, rechecks: int = 0) -> VR1Config:
        if rechecks < 0:
            raise ValueError(f"rechecks must be >= 0, got {rechecks}")
        # The overthinking variant keeps the single-route, never-wrong reasoner it was measured with:
        # its point is the habit of re-checking, not the routes.
        plain = {"reasoner_styles": 1, "reasoner_slip": 0.0, "questions": "counts"} if rechecks else {}
        if quick:
            return cls(seed=seed, quick=True, reasoner_rechecks=rechecks, stages=((72, 8, 15), (96, 4, 15)),
                       eval_problems=90, **plain)
        return cls(seed=seed, reasoner_rechecks=rechecks, **plain)

    def __post_init__(self) -> None:
        if not 0 <= self.reasoner_glance <= 1:  # here, not first when the cold start loads the reasoner
            raise ValueError(f"reasoner_glance is a share of problems in [0, 1], got {self.reasoner_glance}")

    def identity(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("reasoner_rechecks", "reasoner_glance"):  # absent when 0, so run folders written before them still resume
            if not d[key]:
                del d[key]
        return d

    def student_key(self) -> str:
        keep = {k: getattr(self, k) for k in ("cold_start_problems", "vlm_error_rate", "sft_steps", "sft_batch", "sft_lr")}
        if self.reasoner_rechecks:  # absent when 0, so the students cached before it keep their keys
            keep["reasoner_rechecks"] = self.reasoner_rechecks
        if (self.reasoner_styles, self.reasoner_slip) != (1, 0.0):  # likewise absent for the single-route reasoner
            keep["reasoner_routes"] = [self.reasoner_styles, self.reasoner_slip]
        if self.reasoner_glance:  # likewise absent when 0
            keep["reasoner_glance"] = self.reasoner_glance
        if self.questions != "counts":  # likewise absent for the question set the earlier students had
            keep["questions"] = self.questions
        # the prompt's text, not its name: an edited template is a new student, never a stale cached one
        prompt = template_path(EVAL_PROMPT).read_text(encoding="utf-8")
        blob = json.dumps([STUDENT_VERSION, prompt, self.warm.key("cap"), keep], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:10]

    @property
    def total_steps(self) -> int:
        return sum(s[2] for s in self.stages)

    def single_stage(self) -> tuple[int, int, int]:
        """(cap, group, steps) of the baseline: as many steps and sampled completions as PTST."""
        completions = sum(g * n for _, g, n in self.stages)
        group = completions // self.total_steps
        if group * self.total_steps != completions:
            raise ValueError(f"PTST stages {self.stages} have no whole mean group size")
        return self.stages[-1][0], group, self.total_steps


def eval_cap(cfg: VR1Config) -> int:
    return cfg.stages[-1][0]


# -- data ----------------------------------------------------------------------------------------


def write_problems(folder: Path, split: str, n: int, seed: int, world: W.WorldConfig, questions: str = "counts") -> Path:
    """Render ``n`` scene problems into ``folder/images`` and ``folder/{split}.jsonl`` (every split but
    ``eval`` from the world's training layouts, :func:`vlrl.demos.shapes.kit.world.layout_split`)."""
    return write_rows(folder, split, P.make_problems(n, seed, world, split, layouts(split), questions), world)


def layouts(split: str) -> str:
    """The world's layout split a problem set draws from: ``eval`` for the held-out set, else ``train``."""
    return "eval" if split == "eval" else "train"


def write_splits(folder: Path, cfg: VR1Config) -> dict[str, Any]:
    """The RL set and the held-out set. Training problems (RL and cold start) come from the world's
    training layouts, held-out ones from its held-out layouts (:func:`vlrl.demos.shapes.kit.world.layout_split`,
    the same split every demo model trains apart from), and :func:`vlrl.demos.shapes.kit.problems.make_heldout`
    checks again that none shares a (layout, question) pair or an image with the cold start or the RL set.

    The cold start's problems are drawn again from their seed (the student's cache holds only what
    it needs), exactly as :func:`build_student` draws them."""
    world = cfg.warm.world
    q = cfg.questions
    train = P.make_problems(cfg.prompts_per_step * cfg.total_steps, cfg.seed, world, "train", layouts("train"), q)
    cold = P.make_problems(cfg.cold_start_problems, cfg.seed, world, "coldstart", layouts("coldstart"), q)
    heldout, skipped = P.make_heldout(cfg.eval_problems, cfg.seed, world, "eval", P.seen_keys(cold) | P.seen_keys(train),
                                      layouts("eval"), q)
    write_rows(folder, "train", train, world)
    write_rows(folder, "eval", heldout, world)
    info = {"train": len(train), "cold_start": len(cold), "eval": len(heldout), "eval_skipped_as_seen": skipped,
            "eval_two_shapes": sum(len(sc.items) == 2 for sc, _ in heldout), "chance": chance_levels(heldout)}
    atomic_write_json(folder / "splits.json", info)
    return info


def chance_levels(problems: list[tuple[W.Scene, dict[str, Any]]], ks: tuple[int, ...] = (1, 4, 8)) -> dict[str, Any]:
    """pass@k of two guessers on ``problems``, to read the models' pass@k against: one that samples
    uniformly from the kind's whole answer space, and one that reads the scene right but guesses the
    step (uniform over :func:`vlrl.demos.shapes.kit.problems.scene_answers`). Means over the problems."""
    def mean(sizes: list[int]) -> dict[str, float]:
        return {f"pass@{k}": round(sum(P.chance_pass_at_k(n, k) for n in sizes) / len(sizes), 4) for k in ks}

    kinds = sorted({p["kind"] for _, p in problems})
    return {"answer_space": {k: len(P.answer_space(k)) for k in kinds},
            "uniform": mean([len(P.answer_space(p["kind"])) for _, p in problems]),
            "scene_guesser": mean([len(P.scene_answers(sc, p["kind"])) for sc, p in problems])}


def write_rows(folder: Path, split: str, problems: list[tuple[W.Scene, dict[str, Any]]], world: W.WorldConfig) -> Path:
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for sc, prob in problems:
        img = folder / "images" / f"{sc.id}.png"
        W.render(sc, world).save(img)
        rows.append({"id": P.problem_id(sc.id, prob["question"]), "image": f"images/{sc.id}.png",
                     "question": prob["question"], "answer": prob["answer"], "kind": prob["kind"],
                     "prompt": student_prompt(prob["question"]), "scene": sc.to_dict()})
    path = folder / f"{split}.jsonl"
    write_jsonl(path, rows)
    return path


def student_prompt(question: str) -> str:
    """The student's user turn (``shapes_reason.jinja``), the same for SFT, RL and evaluation."""
    from vlrl.core.prompts import render

    return render(EVAL_PROMPT, question=question, choices=[])


# -- the student: cold start by modality bridging, then SFT --------------------------------------


def build_student(cfg: VR1Config, captioner: Path, cache_dir: Path) -> Path:
    """Cached: the captioner after the project's cold start and SFT (``.../student``)."""
    final = cache_dir / f"vr1-student-{cfg.student_key()}-s{cfg.seed}"

    def build(tmp: Path) -> dict[str, Any]:
        from vlrl.methods.vision_r1.cold_start import cold_start

        src = write_problems(tmp / "problems", "coldstart", cfg.cold_start_problems, cfg.seed, cfg.warm.world,
                             cfg.questions)
        stats = cold_start(str(src), f"{STANDINS}:vlm?error_rate={cfg.vlm_error_rate}",
                           reasoner_spec(cfg), tmp / "cold_start", batch_size=64,
                           vlm_max_tokens=128, reasoner_max_tokens=256, seed=cfg.seed)
        if not stats["kept"]:
            raise RuntimeError(f"cold start kept no sample ({stats['reject_reasons']})")
        kept = [{**r, "prompt": student_prompt(r["question"])} for r in read_jsonl(tmp / "cold_start" / "sft.jsonl")]
        write_jsonl(tmp / "cold_start" / "sft_prompted.jsonl", kept)
        metrics = run_recipe(write_sft_recipe(tmp, cfg, captioner))
        for ckpt in (tmp / "student").glob("checkpoint-*"):
            shutil.rmtree(ckpt, ignore_errors=True)
        return {"kind": "vision-r1 student", "seed": cfg.seed, "cold_start": stats, "sft": metrics,
                "examples": [{k: r[k] for k in ("id", "question", "answer", "response", "description")} for r in kept[:6]]}

    return cached(final, build)


def reasoner_spec(cfg: VR1Config) -> str:
    spec = f"{STANDINS}:reasoner?rechecks={cfg.reasoner_rechecks}"
    if (cfg.reasoner_styles, cfg.reasoner_slip) != (1, 0.0):
        spec += f"&styles={cfg.reasoner_styles}&slip={cfg.reasoner_slip}"
    if cfg.reasoner_glance:
        spec += f"&glance={cfg.reasoner_glance}"
    return spec


def write_sft_recipe(root: Path, cfg: VR1Config, captioner: Path) -> Path:
    recipe = {
        "method": "sft",
        "model": {"path": str(captioner), "dtype": "float32"},
        "data": {"source": str(root / "cold_start" / "sft_prompted.jsonl"), "response_column": "response"},
        "trainer": {
            "output_dir": str(root / "student"),
            "max_steps": cfg.sft_steps,
            "per_device_train_batch_size": cfg.sft_batch,
            "gradient_accumulation_steps": 1,
            "learning_rate": cfg.sft_lr,
            "lr_scheduler_type": "cosine",
            "warmup_steps": 10,
            "logging_steps": 10,
            "save_strategy": "no",
            "seed": cfg.seed,
            "dataloader_num_workers": 0,
            "gradient_checkpointing": False,
            "report_to": "none",
        },
    }
    return save_recipe(recipe, root / "sft.yaml")


# -- RL ------------------------------------------------------------------------------------------


def rl_recipe(out: Path, cfg: VR1Config, student: Path, name: str, single: bool) -> Path:
    """PTST (``single=False``) or the single-stage GRPO baseline, both with ``hfrrf``."""
    cap, group, steps = cfg.single_stage() if single else cfg.stages[0]
    recipe: dict[str, Any] = {
        "method": "grpo" if single else "ptst",
        "model": {"path": str(student), "dtype": "float32"},
        "data": {"source": str(out / "data" / "train.jsonl")},
        "rewards": [{"name": "hfrrf"}],
        "trainer": grpo_trainer(out / name, cfg.seed, cfg.learning_rate, cfg.temperature, save_steps=10,
                                per_device_train_batch_size=cfg.prompts_per_step * group),
        "callbacks": [CALLBACK],
    }
    if single:
        recipe["trainer"].update(max_steps=steps, num_generations=group, max_completion_length=cap)
    else:
        recipe["stages"] = [{"max_completion_length": c, "num_generations": g, "steps": n} for c, g, n in cfg.stages]
        recipe["ptst"] = {"prompts_per_step": cfg.prompts_per_step}
    return save_recipe(recipe, out / f"{name}.yaml")


def ptst_history(out: Path, cfg: VR1Config) -> list[dict[str, Any]]:
    """Every logged step of every stage, numbered across the run, with its stage."""
    hist, offset = [], 0
    for k, (_, _, steps) in enumerate(cfg.stages, start=1):
        for h in read_history(out / "ptst" / f"stage-{k}"):
            hist.append({**h, "stage": k, "step": h["step"] + offset})
        offset += steps
    return hist


# -- evaluation ----------------------------------------------------------------------------------


def evaluate(model_dir: Path, out: Path, name: str, cfg: VR1Config) -> dict[str, Any]:
    from vlrl.methods.vision_r1.evaluate import evaluate_reasoning

    folder = out / "eval" / name
    if folder.exists():  # a half-written evaluation of an interrupted run is redone from scratch
        shutil.rmtree(folder)
    m = evaluate_reasoning(hf_spec(model_dir, 64), str(out / "data" / "eval.jsonl"),
                           folder, max_tokens=eval_cap(cfg), temperature=0.0, batch_size=64, group_by="kind",
                           seed=cfg.seed, prompt=EVAL_PROMPT, samples=cfg.eval_samples,
                           sample_temperature=cfg.temperature)
    shutil.rmtree(folder / "cache", ignore_errors=True)
    return m


def summary(m: dict[str, Any]) -> dict[str, Any]:
    return {"acc": round(m["accuracy"], 4), "acc_strict": round(m["accuracy_strict_format"], 4),
            "format": round(1 - m["format_failure_rate"], 4),
            "acc_formatted": None if m["accuracy_when_formatted"] is None else round(m["accuracy_when_formatted"], 4),
            "mean_tokens": round(m.get("completion_tokens", {}).get("mean", 0.0), 2),
            "truncation": round(m["truncation_rate"], 4),
            "by_kind": {k: round(v["accuracy"], 4) for k, v in m.get("by_group", {}).items()},
            "pass_at_k": _rounded(m.get("pass_at_k", {})),
            "pass_at_k_by_kind": {k: _rounded(v.get("pass_at_k", {})) for k, v in m.get("by_group", {}).items()},
            "sampled_right_share": {k: (round(v, 4) if isinstance(v, float) else v)
                                    for k, v in m.get("sampled_right_share", {}).items()}}


def _rounded(table: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in table.items()}


# -- the whole demo ------------------------------------------------------------------------------


def run_vision_r1_demo(out: str | Path = "runs/demo-vision-r1", seed: int = 0, quick: bool = False,
                       force: bool = False, cache_dir: str | Path | None = None,
                       config: VR1Config | None = None, rechecks: int = 0) -> dict[str, Any]:
    """Run (or resume, or reuse) the Vision-R1 demo in ``out``; returns the metrics.

    ``rechecks`` > 0 gives the cold start an overthinking reasoner (see :func:`vlrl.demos.shapes.standins.reasoning.reasoner`).
    """
    cfg = config or VR1Config.make(seed=seed, quick=quick, rechecks=rechecks)
    run = open_run(out, cfg, force, cache_dir)
    if run.reused is not None:
        return run.reused
    out, stages, cache = run.out, run.stages, run.cache

    t = time.time()
    ws = paths(cfg.warm, cfg.seed, cfg.seed, cache)
    build_tokenizer(cfg.warm, cache)
    cached(ws.captioner, lambda tmp: train_captioner(cfg.warm, ws.tokenizer, tmp, cfg.seed))
    student_dir = build_student(cfg, ws.captioner, cache)
    student = student_dir / "student"
    stages.add_time("warm_start", time.time() - t)

    if not stages.done("data"):
        t = time.time()
        write_splits(out / "data", cfg)
        stages.finish("data", time.time() - t)
    runs = [("before", student, None), ("ptst", out / "ptst" / f"stage-{len(cfg.stages)}", True),
            ("single", out / "single", False)]
    for name, model_dir, ptst in runs:
        if ptst is not None and not stages.done(name):
            t = time.time()
            run_recipe(rl_recipe(out, cfg, student, name, single=not ptst))
            stages.finish(name, time.time() - t)
        if not stages.done(f"eval_{name}"):
            t = time.time()
            atomic_write_json(out / "eval" / f"{name}.json", evaluate(model_dir, out, name, cfg))
            stages.finish(f"eval_{name}", time.time() - t)

    from vlrl.demos.shapes.vision_r1.report import write_report

    evals = {name: json.loads((out / "eval" / f"{name}.json").read_text()) for name, _, _ in runs}
    info = json.loads((student_dir / "warmstart.json").read_text())
    history = ptst_history(out, cfg)
    single_history = read_history(out / "single")
    splits = json.loads((out / "data" / "splits.json").read_text())
    metrics = build_metrics(cfg, evals, history, single_history, info, stages.times, splits=splits)
    write_report(out, cfg, metrics, evals, history, single_history, info)
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def _gap(summ: dict[str, Any]) -> float | None:
    p8 = summ["pass_at_k"].get("pass@8")
    return None if p8 is None else round(p8 - summ["acc"], 4)


def trained_on(cfg: VR1Config) -> dict[str, str]:
    """What every model of the run saw in training (the held-out problems are none of it)."""
    return {
        "captioner": "shapes-world captions of its own scenes, training layouts only (the CapRL demo's warm start, SFT)",
        "student": (f"the captioner, then SFT on the cold start's kept chains for {cfg.cold_start_problems} problems "
                    f"of the question set '{cfg.questions}' "
                    f"(split 'coldstart', seed {cfg.seed}, training layouts); the chains come from the stand-in VLM's description "
                    "and the stand-in reasoner, kept only where HFRRF's checker calls the answer right"),
        "ptst": f"the student, then PTST with hfrrf on the {cfg.prompts_per_step * cfg.total_steps} RL problems (split 'train')",
        "single": "the student, then single-stage GRPO with hfrrf on the same RL problems",
    }


def build_metrics(cfg: VR1Config, evals: dict[str, dict], history: list[dict], single_history: list[dict],
                  info: dict[str, Any], times: dict[str, float], window: int = 5,
                  splits: dict[str, Any] | None = None) -> dict[str, Any]:
    b, a, s = (summary(evals[k]) for k in ("before", "ptst", "single"))
    rewards = [h.get("rewards/hfrrf/mean", h["reward"]) for h in history]
    srewards = [h.get("rewards/hfrrf/mean", h["reward"]) for h in single_history]
    cap, group, steps = cfg.single_stage()
    cs = info.get("cold_start", {})
    m: dict[str, Any] = {
        "method": "vision-r1",
        "seed": cfg.seed,
        "quick": cfg.quick,
        "acc_before": b["acc"], "acc_after": a["acc"], "gain": round(a["acc"] - b["acc"], 4),
        "format_before": b["format"], "format_after": a["format"],
        "mean_tokens_before": b["mean_tokens"], "mean_tokens_after": a["mean_tokens"],
        "acc_strict_before": b["acc_strict"], "acc_strict_after": a["acc_strict"],
        # accuracy among well-formed outputs: separates "answers better" from "stops in time"
        "acc_formatted_before": b["acc_formatted"], "acc_formatted_after": a["acc_formatted"],
        "single_stage_acc_formatted_after": s["acc_formatted"],
        "truncation_before": b["truncation"], "truncation_after": a["truncation"],
        "single_stage_truncation_after": s["truncation"],
        "reasoner_rechecks": cfg.reasoner_rechecks,
        "single_stage_acc_after": s["acc"], "single_stage_format_after": s["format"],
        "single_stage_mean_tokens_after": s["mean_tokens"],
        "reward_first": window_mean(rewards, window, last=False),
        "reward_last": window_mean(rewards, window, last=True),
        "single_stage_reward_first": window_mean(srewards, window, last=False),
        "single_stage_reward_last": window_mean(srewards, window, last=True),
        "reward_window_steps": window,
        "acc_by_kind_before": b["by_kind"], "acc_by_kind_after": a["by_kind"], "acc_by_kind_single": s["by_kind"],
        # pass@k at the rollout temperature (unbiased over eval_samples samples a problem) beside greedy:
        # RL on an outcome reward can only lift greedy towards what the policy already samples.
        "pass_at_k": {"before": b["pass_at_k"], "ptst": a["pass_at_k"], "single": s["pass_at_k"]},
        "pass_at_k_by_kind": {"before": b["pass_at_k_by_kind"], "ptst": a["pass_at_k_by_kind"],
                              "single": s["pass_at_k_by_kind"]},
        "sampled_right_share": {"before": b["sampled_right_share"], "ptst": a["sampled_right_share"],
                                "single": s["sampled_right_share"]},
        "pass8_minus_greedy_before": _gap(b), "pass8_minus_greedy_after": _gap(a),
        "single_stage_pass8_minus_greedy_after": _gap(s),
        # what a guesser's pass@k is on the same held-out problems (answer space, and scene read right)
        "chance_pass_at_k": (splits or {}).get("chance"),
        "questions": cfg.questions,
        "eval_samples": cfg.eval_samples, "sample_temperature": cfg.temperature,
        "eval_problems": evals["before"]["n"],
        "ptst_stages": [{"max_completion_length": c, "num_generations": g, "steps": n} for c, g, n in cfg.stages],
        "single_stage": {"max_completion_length": cap, "num_generations": group, "steps": steps},
        "prompts_per_step": cfg.prompts_per_step,
        "cold_start": {k: cs.get(k) for k in ("total", "kept", "rejected", "keep_rate", "reject_reasons")},
        "reasoner": {"routes": cfg.reasoner_styles, "slip": cfg.reasoner_slip, "rechecks": cfg.reasoner_rechecks},
        "splits": splits,
        "trained_on": trained_on(cfg),
        "sft": {k: info.get("sft", {}).get(k) for k in ("global_step", "loss_first", "loss_last", "rows")},
        "stage_seconds": times,
        **timing(times),
    }
    # 95% intervals of the greedy accuracies: one problem per scene, so the Wilson interval over problems
    # is the interval over scenes
    from vlrl.core.stats import wilson

    for key, ev in (("acc_before", "before"), ("acc_after", "ptst"), ("single_stage_acc_after", "single")):
        n = evals[ev].get("n") or 0
        ci = wilson(round(m[key] * n), n) if m.get(key) is not None else None
        m[f"{key}_ci"] = [round(ci[0], 4), round(ci[1], 4)] if ci else None
    return m
