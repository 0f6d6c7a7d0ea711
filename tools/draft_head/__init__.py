"""How the default model's draft head is made (needs the conversion extra: ``pip install -e '.[convert]'``).

1. ``python -m tools.draft_head.generate --out DATA --shards 64``: prompts written by the target itself and seeded
   templates, the target's replies (greedy and at the chat defaults) and its hidden states, in resumable shards
   (``generate.py``). About 55,000 reply tokens per shard, 3.5 minutes per shard on a quiet 2-core machine. The
   conversations are kept in ``conversations/`` (``corpus.py``; committed, 170 KB a shard): on a new machine the
   same command rebuilds the shards found there from their token ids (hidden states only, about half the time)
   and generates the rest.
2. ``python -m tools.draft_head.train --data DATA --out RUN [--train-tokens N]``: trains ``head.DraftHead`` on the
   training shards and reports acceptance on the held-out ones after every epoch (``train.py``); several values of
   ``--train-tokens`` give the learning curve.
3. ``python -m tools.draft_head.export --checkpoint RUN/head.pt --out inference/models/data/SmolLM2-135M-Instruct-head``:
   the stateful OpenVINO IR (int8 weights) and its manifest, which the engine loads without torch (``export.py``).
   The manifest records each file's SHA-256 (checked at install and load), the shards trained on, and every
   stage's command (``training.rebuild``): the shipped head's are there, runnable from the repository root;
   ``make head`` (``rebuild.py``) runs them into ``build/draft_head/head`` and checks the result's held-out
   acceptance against the shipped head's.
4. ``python -m tools.draft_head.datastore_check --data DATA``: would a datastore of the target's own replies
   (REST) add to the head? Both scored teacher-forced on the held-out greedy replies (``datastore_check.py``).

5. ``tools/draft_head/fused_run.sh DATA``: the fused head's long run (EAGLE-3's low/mid-layer features and a
   training-time test over three drafting steps, continued from the shipped head on shards 1-49, streamed,
   resumable; ``generate.py --layers``, ``train.py --stream-shards --init-head``, ``import_ir.py``); ``python -m
   tools.draft_head.fused_cost --model MODEL`` measures what the extra target outputs cost a one-token pass.

The engine side is ``inference/draft_head.py`` (loading) and ``inference/drafting.py``'s ``HeadDrafter``.
"""
