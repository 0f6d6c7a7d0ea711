"""The window's local server settings as the settings file keeps them (its ``"server"`` object): the switch, the
port and whether other computers may connect. ``SettingsStore`` reads and writes them with the rest of
``settings.json``; ``app.gui.local_server`` runs the server they describe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerSettings:
    """The window's local server (``app.gui.local_server``), as the settings file keeps it.

    Attributes:
        enabled: the switch was on when the window last closed (the server starts again with the model).
        port: TCP port, 1-65535 (8000, as ``specchat serve``).
        allow_other_computers: bind every interface (``0.0.0.0``) instead of ``127.0.0.1``; needs an API key.

    Its API key is not kept here: ``app.backends.remote_keys`` keeps it (name ``LOCAL_SERVER``).
    """

    enabled: bool = False
    port: int = 8000
    allow_other_computers: bool = False

    def to_json(self) -> dict[str, Any]:
        """The file's ``"server"`` object."""
        return {"enabled": self.enabled, "port": self.port, "allow_other_computers": self.allow_other_computers}

    @classmethod
    def from_json(cls, raw: Any, warnings: list[str]) -> ServerSettings:
        """Settings from the file's ``"server"`` object; a missing or invalid entry takes its default (an invalid
        one is appended to ``warnings``)."""
        if raw is not None and not isinstance(raw, dict):
            warnings.append(f"server settings {raw!r} are not a JSON object; using the defaults")
        values: dict[str, Any] = {}
        for name, default in cls().to_json().items():
            if not isinstance(raw, dict) or name not in raw:
                continue
            value = raw[name]
            valid = isinstance(value, bool) if isinstance(default, bool) else (
                isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535
            )
            if valid:
                values[name] = value
            else:
                warnings.append(f"server setting {name} has an invalid value {value!r}; using the default")
        return cls(**values)
