"""``vlrl serve reward`` as a command: a tiny GRPO run trains through it, a dead backend stops a run
in seconds, and the Ray Serve engine loses nothing when a replica is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT
from tests.support.serve import vlrl_service, wait_ready
from tests.support.servers import free_port, get_json

TINY = ROOT / "train" / "recipes" / "tiny" / "caprl_tiny.yaml"

pytestmark = pytest.mark.slow


def remote_recipe(tmp_path: Path, url: str, **trainer) -> Path:
    doc = yaml.safe_load(TINY.read_text())
    doc["rewards"] = [{"name": "remote", "settings": {"url": url, "timeout_s": 120, "retries": 2}}]
    doc["trainer"].update(output_dir=str(tmp_path / "run"), **trainer)
    path = tmp_path / "remote.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def train(recipe: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    vlrl = Path(sys.executable).parent / "vlrl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run([str(vlrl), "train", "grpo", "--recipe", str(recipe)], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_tiny_grpo_and_verl_score_through_the_service(tmp_path, engine):
    if engine == "ray":
        pytest.importorskip("ray.serve")
    args = ["--recipe", str(TINY), "--max-wait-ms", "50", "--engine", engine]
    with vlrl_service(args, tmp_path / "serve.log") as service:
        root = service.root
        wait_ready(root)
        proc = train(remote_recipe(tmp_path, root, max_steps=2, save_steps=2))
        metrics = subprocess.run(["curl", "-s", root + "/metrics"], capture_output=True, text=True).stdout
        verl_score, direct = verl_and_direct(root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout[proc.stdout.rindex("\n{\n") + 1 :])  # the metrics, after the trainer's logs
    assert out["global_step"] == 2
    history = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    keys = set().union(*history)
    assert "rewards/remote/mean" in keys
    assert "remote/qa_acc" in keys and any(k.startswith("remote/guard/") for k in keys)  # sub-scores came back
    rows = [ln for ln in metrics.splitlines() if ln.startswith('vlrl_serve_rows_total{outcome="scored"}')]
    assert rows and float(rows[0].split()[-1]) >= 16  # 2 steps x 8 completions (+ the verl sample)
    # verl's compute_score reaches the same service: its score is the service's for the draw key as step
    assert verl_score["applicable"] == 1.0 and verl_score["score"] == direct["reward"]
    assert verl_score["qa_acc"] == direct["details"]["qa_acc"]



def verl_and_direct(root: str) -> tuple[dict, dict]:
    from tests.support.serve import QUESTION_BANK
    from vlrl.rewards.remote import RemoteClient
    from vlrl.training import verl

    caption = "A red circle above three squares."
    info = {"questions": QUESTION_BANK, "index": 5}
    got = verl.compute_score("caprl", caption, None, info, reward="remote", settings={"url": root})
    (direct,) = RemoteClient(root).score([{"id": 0, "completion": caption, "questions": QUESTION_BANK, "index": 5}], 5)
    return got, direct


def test_a_dead_backend_stops_the_run_in_seconds(tmp_path):
    dead = f"openai:http://127.0.0.1:{free_port()}/v1@answerer"
    args = ["-r", "caprl_qa", "-s", f"answerer={dead}", "-s", "mode=exact"]
    with vlrl_service(args, tmp_path / "serve.log") as service:
        root = service.root
        t0 = time.monotonic()
        proc = train(remote_recipe(tmp_path, root), timeout=300)
        elapsed = time.monotonic() - t0
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if "remote" in ln and "not ready" in ln]
    assert lines, proc.stderr[-2000:]
    assert "127.0.0.1" in lines[0]
    print(f"dead backend stopped the run after {elapsed:.1f}s")


def test_service_dying_mid_run_stops_training_with_one_line(tmp_path):
    """The service answers pre-flight, then goes away: the run ends non-zero with one line, not 0.0s."""
    port = free_port()
    log = tmp_path / "serve.log"
    vlrl = Path(sys.executable).parent / "vlrl"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "wb") as fh:
        svc = subprocess.Popen([str(vlrl), "serve", "reward", "--recipe", str(TINY), "--port", str(port)],
                               stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if get_json(root + "/ready").get("ready"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline and svc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.5)
        recipe = remote_recipe(tmp_path, root, max_steps=3)
        doc = yaml.safe_load(recipe.read_text())
        doc["rewards"][0]["settings"].update(retries=1, backoff_s=0.1)
        recipe.write_text(yaml.safe_dump(doc))
        vlrl_env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
        trainer = subprocess.Popen([str(vlrl), "train", "grpo", "--recipe", str(recipe)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=vlrl_env)
        # the service goes away once the run passed pre-flight (its identity file is written then)
        while not (tmp_path / "run").exists() and trainer.poll() is None:
            time.sleep(0.2)
        svc.kill()
        svc.wait(30)
        _, err = trainer.communicate(timeout=600)
    finally:
        if svc.poll() is None:
            svc.kill()
    assert trainer.returncode == 1
    stops = [ln for ln in err.splitlines() if ln.startswith("error: training stopped:")]
    assert len(stops) == 1 and "reward service" in stops[0] and "failure_budget 0" in stops[0]
