"""GRPO on video prompts through TRL: the one adapter, and where TRL 1.16 falls short.

TRL 1.16's ``GRPOTrainer`` is built for images. Read against its source, three gaps leave video
rows unusable, and one of them silently so:

1. **No video column.** ``_generate_and_score_completions`` collects ``image``/``images`` from the
   rows and nothing else; a ``video`` column reaches the rewards but never the model.
2. **The loss forward is blind to video.** ``_get_per_token_logps_and_entropies`` forwards
   ``pixel_values``/``image_grid_thw`` (and other image fields) only, and the inputs kept for the
   loss carry no ``pixel_values_videos``/``video_grid_thw``/``second_per_grid_ts``. A prompt whose
   template holds ``<|video_pad|>`` tokens would be *generated* with the video (if the processor
   loaded it while templating) and then *trained* on log-probabilities computed without it: the
   ``<|video_pad|>`` positions embedded as text. Nothing fails; the gradient is simply wrong.
3. **vLLM rollouts pass images only** (``vllm_generation.generate(prompts, images=...)``).

:class:`VideoGRPOMixin`, mixed into vlrl's trainer class (:func:`vlrl.training.grpo._trainer_class`),
closes 1 and 2 for TRL's own ``generate`` and refuses 3 (``use_vllm: true`` with video rows stops
with the reason, before any rollout). It overrides three methods, each in one place:

* ``_generate_and_score_completions``: decodes each row's video once per batch with
  :func:`vlrl.core.video.load_video_value` (qwen-vl-utils' frame rules, the frames ``vlrl caption
  --videos`` shows a model, under the recipe's ``data.video``), and puts each sample's video
  tensors into the batch as ``vlrl_video`` (a list, one per sample, which TRL's shuffle and split
  carry like any per-sample list).
* ``_tokenize_prompts``: adds a video part to each user turn, templates it, and encodes text and
  frames with the processor (told which source frames they are, ``do_sample_frames=False``, as the
  ``hf:`` backend does), so generation sees the video.
* ``_get_per_token_logps_and_entropies``: for each chunk of rows, adds that chunk's video tensors
  and ``mm_token_type_ids`` (2 at ``<|video_pad|>``) to the model's forward through a forward
  pre-hook held only for that call; old, reference and policy log-probabilities all see the video.

Image rows never enter this code (a batch without ``video`` goes straight to TRL). A training set
holds one kind of media (:func:`vlrl.training.data.to_trl_dataset`).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts")
"""The processor outputs a Qwen-VL forward needs for a video (``second_per_grid_ts``: Qwen2.5-VL)."""


def video_part(prompt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``prompt`` with a ``{"type": "video"}`` part before the first user turn's text (as TRL's
    ``prepare_multimodal_messages`` places image parts); other turns become content-part lists."""
    out, placed = [], False
    for m in prompt:
        content = m.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        if m.get("role") == "user" and not placed:
            parts = [{"type": "video"}, *parts]
            placed = True
        out.append({**m, "content": parts})
    return out


def suppress_video_token(trainer: Any) -> None:
    """Never sample ``<|video_pad|>`` in TRL's own generation (it already suppresses the image token).

    A sampled placeholder in a completion is counted by the model's loss forward as one more video
    token than the features it is given, and the step stops ("Video features and video tokens do
    not match"); a tiny policy at temperature 1 with top-k off draws it now and then."""
    vid = getattr(getattr(trainer.model, "config", None), "video_token_id", None)
    kwargs = getattr(trainer, "generation_kwargs", None)
    if vid is None or not isinstance(kwargs, dict):
        return
    tokens = list(kwargs.get("suppress_tokens") or [])
    if vid not in tokens:
        kwargs["suppress_tokens"] = [*tokens, vid]
        if getattr(trainer, "generation_config", None) is not None:
            trainer.generation_config.suppress_tokens = kwargs["suppress_tokens"]


def encode_video_prompt(processor, prompt: list[dict[str, Any]], clip: Any, **template_kwargs: Any):
    """One prompt with its video, tokenized as the trainer's generation sees it: the video part
    placed by :func:`video_part`, the chat template (generation prompt added), and the processor
    told which source frames the clip's are (``do_sample_frames=False``, as the ``hf:`` backend
    does). Code that trains on the same prompts outside GRPO (a demo's warm start) encodes here."""
    text = processor.apply_chat_template(video_part(prompt), tokenize=False, add_generation_prompt=True,
                                         **template_kwargs)
    meta = [{"fps": clip.source_fps, "frames_indices": clip.meta.get("frames_indices", list(range(len(clip.frames)))),
             "total_num_frames": clip.total_frames}]
    return processor(text=[text], videos=[clip.frames], video_metadata=meta, do_sample_frames=False,
                     return_tensors="pt")


class VideoGRPOMixin:
    """Video rows through TRL's ``GRPOTrainer`` (see the module docstring). Mixed in before it."""

    _vlrl_clips: list[Any] | None = None
    _vlrl_videos: list[dict[str, Any]] | None = None
    _vlrl_video_spec: Any = None

    def _generate_and_score_completions(self, inputs):
        values = [x.get("video") for x in inputs] if inputs and "video" in inputs[0] else None
        if not values or all(v is None for v in values):
            return super()._generate_and_score_completions(inputs)
        if any(v is None for v in values):
            raise ValueError("a batch mixes rows with and without a video; a training set holds one kind of media")
        if getattr(self, "use_vllm", False):
            raise ValueError("video rows need TRL's own generation (trainer.use_vllm: false): TRL 1.16's vLLM "
                             "rollouts pass images only (docs/training.md, 'Video')")
        from vlrl.core.video import load_video_value

        decoded: dict[str, Any] = {}
        for v in values:
            if v not in decoded:
                decoded[v] = load_video_value(v, record=v, spec=self._vlrl_video_spec)
        self._vlrl_clips = [decoded[v] for v in values]
        self._vlrl_videos = [{} for _ in values]  # filled by _tokenize_prompts, per sample
        try:
            output = super()._generate_and_score_completions(inputs)
            output["vlrl_video"] = self._vlrl_videos
            return output
        finally:
            for clip in decoded.values():
                clip.close()
            self._vlrl_clips = None
            self._vlrl_videos = None

    def _tokenize_prompts(self, prompts: list):
        clips = self._vlrl_clips
        if clips is None:
            return super()._tokenize_prompts(prompts)
        import torch

        proc = self.processing_class
        prompt_ids, fields, cache = [], {}, {}
        for i, (prompt, clip) in enumerate(zip(prompts, clips, strict=True)):
            key = (id(clip), repr(prompt))
            if key not in cache:  # a GRPO group's copies of one prompt are encoded once
                cache[key] = encode_video_prompt(proc, prompt, clip, chat_template=self.chat_template,
                                                 **self.chat_template_kwargs)
            enc = cache[key]
            prompt_ids.append(enc["input_ids"][0].tolist())
            device = self.accelerator.device
            self._vlrl_videos[i] = {k: enc[k].to(device) for k in VIDEO_KEYS if k in enc}
            for k in VIDEO_KEYS:
                if k in enc:
                    fields.setdefault(k, []).append(enc[k])
            if "mm_token_type_ids" in enc:
                fields.setdefault("mm_token_type_ids", []).append(enc["mm_token_type_ids"][0].tolist())
        merged = {k: (torch.cat(v) if isinstance(v[0], torch.Tensor) else v) for k, v in fields.items()}
        return prompt_ids, None, merged

    def _compute_loss(self, model, inputs):
        self._vlrl_videos = inputs.get("vlrl_video")
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._vlrl_videos = None

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **kwargs):
        videos = self._vlrl_videos
        if not videos or not videos[0]:
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                                              compute_entropy, compute_aux_loss, **kwargs)
        import torch

        pad_id = self._video_pad_token_id
        size = batch_size or input_ids.size(0)
        logps, entropies, aux = [], [], []
        for start in range(0, input_ids.size(0), size):
            end = min(start + size, input_ids.size(0))
            chunk = videos[start:end]
            extra = {k: torch.cat([v[k] for v in chunk]) for k in VIDEO_KEYS if k in chunk[0]}
            mm = torch.zeros_like(input_ids[start:end])
            if pad_id is not None:
                mm[input_ids[start:end] == pad_id] = 2
            extra["mm_token_type_ids"] = mm

            def add_video(module, args, kw, extra=extra):
                return args, {**kw, **extra}

            handle = model.register_forward_pre_hook(add_video, with_kwargs=True)
            try:
                lp, ent, ax = super()._get_per_token_logps_and_entropies(
                    model, input_ids[start:end], attention_mask[start:end], logits_to_keep, end - start,
                    compute_entropy, compute_aux_loss, **kwargs)
            finally:
                handle.remove()
            logps.append(lp)
            if ent is not None:
                entropies.append(ent)
            if ax is not None:
                aux.append(ax)
        return (torch.cat(logps), torch.cat(entropies) if entropies else None,
                torch.stack(aux).mean() if aux else None)
