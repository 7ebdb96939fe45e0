"""Offline validation of Zero to JupyterHub values (jupyter/class-hub/z2jh-values.yaml): no
cluster, no Helm, no network.

Three checks, each strict (an unknown, say misspelled, key is an error):

1. the chart's own schema, ``coursekit/schemas/z2jh-values-4.4.0.json`` (the chart's
   ``values.schema.yaml`` at its 4.4.0 release, descriptions dropped), on the values merged with
   the chart's defaults (``z2jh-defaults-4.4.0.json``) as Helm merges them: maps key by key,
   a list or a scalar replaces, null removes a default;
2. what that schema leaves open (any content): each profile of ``singleuser.profileList`` and its
   ``kubespawner_override`` (KubeSpawner sets any key it is given, a misspelled one silently),
   and ``hub.config``'s JupyterHub, SharedPasswordAuthenticator and KubeSpawner sections, against
   the traits of the kubespawner and jupyterhub the chart's hub image pins
   (``z2jh-hub-4.4.0.json``);
3. the Kubernetes objects the values hand to the pod (``singleuser.storage.extraVolumes`` and
   ``extraVolumeMounts``, ``extraTolerations``, ``lifecycleHooks``, the overrides' volumes,
   mounts and tolerations) against the Kubernetes schemas of :mod:`coursekit.k8s`; resource
   limits must be Kubernetes quantities given as strings.

``scripts/z2jh_schemas.py`` writes the three schema files from the projects' git sources.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import yaml

from . import k8s

CHART_VERSION = "4.4.0"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
VALUES = Path(__file__).resolve().parent.parent / "jupyter" / "class-hub" / "z2jh-values.yaml"
# a Kubernetes quantity ("1", "500m", "2Gi"): what a resource limit is given as
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i?|[mkMGTPE]|[eE][+-]?\d+)?$")
# the values that hold Kubernetes objects (a list or a map of them; lifecycleHooks is one)
POD_PIECES = (
    (("singleuser", "storage", "extraVolumes"), "Volume"),
    (("singleuser", "storage", "extraVolumeMounts"), "VolumeMount"),
    (("singleuser", "extraTolerations"), "Toleration"),
    (("singleuser", "lifecycleHooks"), "Lifecycle"),
)
OVERRIDE_PIECES = {"volumes": "Volume", "volume_mounts": "VolumeMount",
                   "tolerations": "Toleration", "lifecycle_hooks": "Lifecycle"}


class ValuesError(k8s.ManifestError):
    """The values fail a check; the message names where and why."""


def _load(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def helm_merge(defaults: dict, values: dict) -> dict:
    """The values Helm renders with: ``values`` over ``defaults`` (maps merged key by key, lists
    and scalars replaced, a null removing the default)."""
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = helm_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _fail(where: str, error: jsonschema.ValidationError) -> ValuesError:
    at = "/".join(str(p) for p in error.absolute_path)
    return ValuesError(f"{where}{'/' + at if at else ''}: {error.message}")


def _check(validator, instance, where: str) -> None:
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        raise _fail(where, error)


def _items(value) -> list:
    """extraVolumes and friends: a list, or (chart 4) a map of name -> item."""
    if value is None:
        return []
    return list(value.values()) if isinstance(value, dict) else list(value)


def _piece(obj, definition: str, where: str, version: str | None) -> None:
    try:
        k8s.validate_piece(obj, definition, where, version)
    except k8s.ManifestError as e:
        raise ValuesError(str(e)) from None


def _quantities(limits: dict | None, where: str) -> None:
    for name, value in (limits or {}).items():
        if not (isinstance(value, str) and QUANTITY.match(value)):
            raise ValuesError(f"{where}/{name}: {value!r} is not a Kubernetes quantity given as "
                              'a string (write "1")')


def validate_values(values: dict, version: str | None = None) -> list[str]:
    """Run the three checks on ``values``; returns what was checked. Raises ValuesError."""
    checked = []
    chart = jsonschema.Draft7Validator(_load(f"z2jh-values-{CHART_VERSION}.json"))
    merged = helm_merge(_load(f"z2jh-defaults-{CHART_VERSION}.json")["values"], values)
    _check(chart, merged, "values")
    checked.append(f"the chart's schema ({CHART_VERSION}), merged with its defaults")

    hub = _load(f"z2jh-hub-{CHART_VERSION}.json")
    singleuser = values.get("singleuser") or {}
    profiles = singleuser.get("profileList") or []
    for kind, instance, where in (("profileList", profiles, "singleuser/profileList"),
                                  ("hubConfig", (values.get("hub") or {}).get("config") or {},
                                   "hub/config")):
        schema = {**hub, "$ref": f"#/properties/{kind}"}
        _check(jsonschema.Draft202012Validator(schema), instance, where)
    checked.append(f"{len(profiles)} profiles and hub.config against KubeSpawner's and "
                   "JupyterHub's traits")

    pieces = 0
    for path, definition in POD_PIECES:
        node = values
        for key in path:
            node = (node or {}).get(key)
        where = "/".join(path)
        if definition == "Lifecycle":
            if node:
                _piece(node, definition, where, version)
                pieces += 1
            continue
        for i, item in enumerate(_items(node)):
            _piece(item, definition, f"{where}/{i}", version)
            pieces += 1
    _quantities((singleuser.get("extraResource") or {}).get("limits"),
                "singleuser/extraResource/limits")
    for i, profile in enumerate(profiles):
        overrides = [("", profile.get("kubespawner_override") or {})]
        for name, option in (profile.get("profile_options") or {}).items():
            for key, choice in (option.get("choices") or {}).items():
                overrides.append((f"/profile_options/{name}/choices/{key}",
                                  choice.get("kubespawner_override") or {}))
        for at, override in overrides:
            where = f"singleuser/profileList/{i}{at}/kubespawner_override"
            for key in ("extra_resource_limits", "extra_resource_guarantees"):
                _quantities(override.get(key), f"{where}/{key}")
            for key, definition in OVERRIDE_PIECES.items():
                value = override.get(key)
                items = [value] if definition == "Lifecycle" and value else _items(value)
                for j, item in enumerate(items):
                    _piece(item, definition, f"{where}/{key}/{j}", version)
                    pieces += 1
    checked.append(f"{pieces} Kubernetes objects (volumes, mounts, tolerations, hooks) and the "
                   "resource limits")
    return checked


def validate_file(path: str | Path = VALUES, version: str | None = None) -> list[str]:
    """Validate a values file; returns what was checked. Raises ValuesError."""
    values = yaml.safe_load(Path(path).read_text())
    if not isinstance(values, dict):
        raise ValuesError(f"{path}: not a map of values")
    return validate_values(values, version)
