"""SpecChat's inference engine: OpenVINO models, speculative decoding, attention-sink rolling context.

Headless and Qt-free. Main entry points: ``Engine`` (engine.py), ``ChatSession`` (chat.py), the settings
dataclasses (settings.py) and the events ``Engine.generate`` yields (events.py).
"""
