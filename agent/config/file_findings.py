"""What the files a valid config names hold: the MQTT password file (read the way the publisher
reads it, dropped at once, never printed) and the files a driver's settings name
(`check_files(base_dir)`, e.g. the GRBL machine file). Each finding is put at the setting's line.

One home for both users: `jha config check` says them, and the daemon refuses to start (exit 78)
or to take a reload on them, so a file others may read fails there and not silently later.
"""

from __future__ import annotations

from pathlib import Path

from agent.config.model import Config
from agent.schema.yaml_lines import ConfigIssue

# systemd's LoadCredential= puts the service's copy here only while the service runs.
_CREDENTIALS_DIR = "/run/credentials/"
_PASSWORD_FIELD = ("publish", "mqtt", "password_file")


def file_findings(config: Config, file: str | Path) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """(errors, warnings) about every file `config` names."""
    errors, warnings = password_file_findings(config, file)
    return errors + settings_file_findings(config, file), warnings + credential_findings(
        config, file
    )


def credential_findings(config: Config, file: str | Path) -> list[ConfigIssue]:
    """A warning when the agent publishes to the broker without a credential of its own."""
    from agent.config.mqtt import credential_warning
    from agent.schema.yaml_lines import load_yaml

    mqtt = config.publish.mqtt
    note = None if mqtt is None else credential_warning(mqtt, "this agent")
    if note is None:
        return []
    line = load_yaml(file).line_of(("publish", "mqtt"))
    return [ConfigIssue(str(file), line, "publish.mqtt", note)]


def password_file_findings(
    config: Config, file: str | Path
) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """(errors, warnings) about `publish.mqtt.password_file`, at the line that sets it."""
    from agent.config.mqtt import PasswordFileError, read_password_text
    from agent.schema.yaml_lines import load_yaml

    mqtt = config.publish.mqtt
    if mqtt is None or mqtt.password_file is None:
        return [], []
    try:
        read_password_text(mqtt.password_file)
        return [], []
    except PasswordFileError as exc:
        problem = exc
    line = load_yaml(file).line_of(_PASSWORD_FIELD)
    path = ".".join(_PASSWORD_FIELD)
    if mqtt.password_file.startswith(_CREDENTIALS_DIR) and not Path(mqtt.password_file).exists():
        note = (
            f"warning: {mqtt.password_file} is not there to check: systemd's LoadCredential= "
            "creates it when the service starts; its source file is not checked here"
        )
        return [], [ConfigIssue(str(file), line, path, note)]
    hint = " (run jha config check as root or as the service user)" if problem.access_denied else ""
    message = (
        "expected a file that only the service user may read or write (mode 0600 or 0400), "
        f"found {problem}{hint}"
    )
    return [ConfigIssue(str(file), line, path, message)], []


def settings_file_findings(config: Config, file: str | Path) -> list[ConfigIssue]:
    """Mistakes in the files the controllers' settings name, at the line of each setting."""
    from agent.schema.yaml_lines import load_yaml

    found: list[ConfigIssue] = []
    tree = None
    for index, controller in enumerate(config.controllers):
        check_files = getattr(controller.settings, "check_files", None)
        if check_files is None:
            continue
        for field, message in check_files(Path(file).parent):
            tree = tree or load_yaml(file)
            where: tuple[str | int, ...] = ("controllers", index, "settings", field)
            path = f"controllers[{index}].settings.{field}"
            found.append(ConfigIssue(str(file), tree.line_of(where), path, message))
    return found
