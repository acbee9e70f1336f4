"""A reward as a network service: ``vlrl serve reward``.

At scale a captioning reward is not a function inside each trainer process: eight nodes of GRPO
workers should not each load the answerer. This package puts one registered reward (with its
guards, its pre-flight and its response cache) behind HTTP, so trainers on any framework call it:

* :mod:`vlrl.serve.service`: the scoring core, free of any web framework. Requests from many
  trainers are queued and scored together in batches (``max_batch_rows``, ``max_wait_ms``) through
  :func:`vlrl.rewards.scoring.score_batch`, the very call ``vlrl reward score`` makes, so the same
  settings, seed and step give the same rewards in both, however rows are split across requests;
* :mod:`vlrl.serve.app`: the FastAPI app (``/v1/score``, the OpenRLHF and CapRL++ compatible
  endpoints, ``/health``, ``/ready``, ``/metrics``), limits, bearer-token auth and drain;
* :mod:`vlrl.serve.compat`: the OpenRLHF ``--remote_rm_url`` and CapRL++ ``/get_reward`` payloads;
* :mod:`vlrl.serve.metrics`: Prometheus counters and histograms;
* :mod:`vlrl.serve.engines`: the two engines, uvicorn in one process (``local``) and the same app
  as a Ray Serve deployment with N replicas (``ray``): Ray Serve does the load balancing and
  replaces a replica that dies.

The client side (the ``remote`` reward for TRL, and verl's ``compute_score``) lives below, in
:mod:`vlrl.rewards.remote`, so any recipe can use it. See docs/serve.md.
"""
