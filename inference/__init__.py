"""SpecChat's inference engine: OpenVINO models, speculative decoding, attention-sink rolling context.

Headless: no Qt, no network, never writes to disk, and never imports the model store (``inference.models``,
which installs the models the engine loads). Main entry points: ``Engine`` (engine.py), ``ChatSession``
(chat.py), the settings dataclasses (settings.py) and the events ``Engine.generate`` yields (events.py).
"""
