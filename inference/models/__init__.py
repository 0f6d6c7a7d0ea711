"""SpecChat's model store: where models live, how they get there (the embedded default from PyPI, local IR and
GGUF imports, hub downloads, conversions) and what each folder holds. It uses the engine's model conventions
(``inference.model``); the engine never imports it."""
